package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// layoutProblems measures the sandbox table in the page and says what a
// user would trip on: a table wider than the page, a header or a cell
// cut, a row taller than three lines, an action not wholly visible, a
// reason whose whole text is not on hover.
const layoutProblems = `(() => {
	const out = [];
	const heads = [...document.querySelectorAll('#sandboxes thead th')];
	const rows = [...document.querySelectorAll('#rows tr')].filter((r) => !r.hidden);
	const main = document.querySelector('main');
	if (main.scrollWidth > main.clientWidth + 1) out.push('the table is wider than the page: ' + main.scrollWidth + ' px in ' + main.clientWidth);
	heads.forEach((th, i) => {
		const name = th.textContent.trim() || 'column ' + (i + 1);
		if (th.scrollWidth > th.clientWidth + 1) out.push('header ' + name + ' is cut: ' + th.scrollWidth + ' px in ' + th.clientWidth);
		for (const tr of rows) {
			const td = tr.children[i];
			if (td.scrollWidth > td.clientWidth + 1) out.push(name + ' of ' + tr.dataset.id + ' is cut: ' + td.scrollWidth + ' px in ' + td.clientWidth);
		}
	});
	const cell = document.querySelector('#rows td');
	const style = getComputedStyle(cell);
	const most = 3 * parseFloat(style.lineHeight) + parseFloat(style.paddingTop) + parseFloat(style.paddingBottom) + 2;
	for (const tr of rows) {
		const h = tr.getBoundingClientRect().height;
		if (h > most) out.push(tr.dataset.id + ' is ' + h.toFixed(1) + ' px tall, more than three lines (' + most.toFixed(1) + ')');
		const live = ['starting', 'started'].includes(tr.querySelector('.state').textContent);
		const want = live ? ['Stop', 'Restart', 'Keep alive', 'Delete'] : ['Start', 'Keep alive', 'Delete'];
		const shown = [...tr.querySelectorAll('.actions button')].filter((b) => !b.hidden);
		if (shown.map((b) => b.textContent).join() !== want.join()) out.push(tr.dataset.id + ' shows ' + shown.map((b) => b.textContent).join());
		const td = tr.querySelector('.actions').getBoundingClientRect();
		for (const b of shown) {
			const r = b.getBoundingClientRect();
			if (r.width === 0 || r.left < 0 || r.right > innerWidth || r.right > td.right + 0.5 || b.scrollWidth > b.clientWidth) {
				out.push(b.textContent + ' of ' + tr.dataset.id + ' is not wholly visible');
			}
		}
		const reason = tr.querySelector('td.col-reason span');
		if (reason.textContent && reason.title !== reason.textContent) out.push(tr.dataset.id + "'s reason has no whole text on hover");
		const name = tr.querySelector('td.col-name button');
		if (!name.title.startsWith(tr.dataset.id + ':')) out.push(tr.dataset.id + "'s name has no whole text on hover");
	}
	return out;
})()`

// The dashboard on a laptop's screen, 1366×768 and 1440×900: every
// column as wide as its header and its content, no row taller than three
// lines, every action a visible button, measured in the page, with the
// rows that broke it before (a long name, a long reason, an origin of
// nine letters, usage); a screenshot of each is kept
// (ACP_DASHBOARD_SCREENSHOTS=docs writes docs/dashboard-WIDTH.png).
func TestDashboardFitsALaptop(t *testing.T) {
	exe := chromium(t)
	d := startDaemon(t)
	long := "a-sandbox-whose-name-is-as-long-as-a-daytona-sandbox-name-may-be"[:63]
	create(t, d, `{"name":"web-7","labels":{"origin":"dashboard"},"envVars":{"STUB_AGENT_PRINT":"hello"}}`)
	create(t, d, `{"name":"`+long+`","labels":{"origin":"harness"}}`)
	create(t, d, `{"name":"crashy","labels":{"origin":"cli"},"envVars":{"STUB_AGENT_READY_DELAY_MS":"3000","STUB_AGENT_EXIT_AFTER_MS":"1"}}`)
	create(t, d, `{"name":"idle","labels":{"origin":"web-ui"}}`)
	waitState(t, d, "web-7", "started")
	waitState(t, d, long, "started")
	waitState(t, d, "crashy", "stopped")
	waitState(t, d, "idle", "started")
	if code, b := call(t, d, "POST", "/v1/sandboxes/idle/stop", ""); code != 200 {
		t.Fatalf("stop idle: %d %s", code, b)
	}
	_, out, _ := cli(t, d, "dashboard")
	ctx := browser(t, exe)
	do(t, ctx, "open the one-time link", chromedp.Navigate(strings.TrimSpace(out)), chromedp.WaitVisible(chromedp.CSS(`#sandboxes`)))
	for _, size := range [][2]int64{{1366, 768}, {1440, 900}} {
		w := strconv.FormatInt(size[0], 10)
		do(t, ctx, "a window of "+w+" px", chromedp.EmulateViewport(size[0], size[1]))
		until(t, ctx, "every row", `document.querySelectorAll('#rows tr').length === 4 && document.querySelector('tr[data-id="idle"] .state').textContent === 'stopped'`)
		until(t, ctx, "crashy's reason", `document.querySelector('tr[data-id="crashy"] td.col-reason span').textContent.startsWith('exited_during_startup')`)
		until(t, ctx, "web-7's usage", `document.querySelector('tr[data-id="web-7"] td.col-usage').textContent !== ''`)
		for _, p := range value(t, ctx, "measure the table at "+w+" px", chromedp.Evaluate[[]string](layoutProblems)) {
			t.Errorf("%s px: %s", w, p)
		}
		png := value(t, ctx, "screenshot", chromedp.CaptureScreenshot())
		shot := filepath.Join(t.TempDir(), "dashboard-"+w+".png")
		if dir := os.Getenv("ACP_DASHBOARD_SCREENSHOTS"); dir != "" {
			shot = filepath.Join(dir, "dashboard-"+w+".png")
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	}
}
