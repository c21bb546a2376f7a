package tests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// chromium finds Debian's Chromium (or another Chrome) to drive, or skips
// saying why there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on PATH: the dashboard test drives a real browser (.ci/run installs Debian's chromium)")
	return ""
}

// browser starts a headless Chromium with a profile of its own (so no
// cookie is shared with another browser of the test) and returns a tab.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // the tests may run as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1500, 860),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", exe, err)
	}
	return ctx
}

// do runs browser actions, failing the test with what it was doing.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// value runs one browser action that answers something.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// until waits in the page until the JavaScript expression is true.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	do(t, ctx, what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Minute)))
}

func rowState(id string) string {
	return `document.querySelector('tr[data-id="` + id + `"] .state')?.textContent`
}

// The dashboard in a real browser: the one-time link signs it in, once,
// and nothing the browser sends another loopback port opens the daemon; rows
// appear, change and go as the daemon's state does, without a reload and
// across a daemon restart; Stop and Delete act on the daemon; the logs
// drawer shows what a sandbox printed; a browser without the link sees no
// sandbox.
//
// It is long because it drives one browser session through the whole
// dashboard, each step on the page the one before left.
func TestDashboardInABrowser(t *testing.T) {
	exe := chromium(t)
	d := startDaemon(t)
	code, out, errOut := cli(t, d, "dashboard")
	if code != 0 {
		t.Fatalf("dashboard: %d %s", code, errOut)
	}
	link := strings.TrimSpace(out)
	ctx := browser(t, exe)
	do(t, ctx, "open the one-time link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`#sandboxes`)))
	where := value(t, ctx, "read the address", chromedp.Location())
	if strings.Contains(where, "code=") || strings.Contains(where, d.Token) {
		t.Errorf("the code stays in the address bar: %s", where)
	}
	until(t, ctx, "the header shows the daemon", `document.getElementById('daemon').textContent.includes('runtimes: native')`)
	until(t, ctx, "the feed is live", `document.getElementById('conn').textContent === 'live'`)

	// Two sandboxes made through the API appear without a reload.
	// With limits where the machine contains sandboxes: the details show
	// usage against them.
	limits := ""
	if os.Getenv("AGENT_CONTROL_PLANE_CGROUPS") != "off" {
		limits = `,"cpu":1,"memory":0.5`
	}
	create(t, d, `{"name":"web-7","labels":{"origin":"web-ui"},"envVars":{"STUB_AGENT_PRINT":"hello from web-7"}`+limits+`}`)
	create(t, d, `{"name":"cli-3f2a","labels":{"origin":"cli"},"autoStopInterval":0}`)
	until(t, ctx, "web-7 started", rowState("web-7")+` === 'started'`)
	until(t, ctx, "cli-3f2a started", rowState("cli-3f2a")+` === 'started'`)
	origin := value(t, ctx, "read web-7's origin", chromedp.Text(chromedp.CSS(`tr[data-id="web-7"] .badge`)))
	port := value(t, ctx, "read web-7's port", chromedp.Text(chromedp.CSS(`tr[data-id="web-7"] a`)))
	if origin != "web-ui" || port != strconv.Itoa(get(t, d, "web-7").Port) {
		t.Errorf("web-7's row: origin %q, port %q", origin, port)
	}

	// A child killed behind the daemon's back: its row turns stopped,
	// with the reason.
	if err := syscall.Kill(childPID(t, d, "cli-3f2a"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "cli-3f2a stopped", rowState("cli-3f2a")+` === 'stopped'`)
	until(t, ctx, "cli-3f2a's reason", `document.querySelector('tr[data-id="cli-3f2a"] td.col-reason .reason-bad')?.textContent === 'killed by signal SIGKILL'`)
	// A reason wraps, and says the whole of it on hover.
	if !value(t, ctx, "read the reason's style", chromedp.Evaluate[bool](`(c => getComputedStyle(c).whiteSpace === 'normal' && c.scrollWidth <= c.clientWidth && c.firstChild.title === 'killed by signal SIGKILL')(document.querySelector('tr[data-id="cli-3f2a"] td.col-reason'))`)) {
		t.Error("the reason cell does not wrap")
	}
	// Search by name hides the rows that do not match, and clearing it
	// shows them again.
	do(t, ctx, "search for web", chromedp.SendKeys(`#f-name`, "WEB"))
	until(t, ctx, "only web-7 is shown", `document.querySelector('tr[data-id="cli-3f2a"]').hidden && !document.querySelector('tr[data-id="web-7"]').hidden`)
	value(t, ctx, "clear the search", chromedp.Evaluate[bool](`(e => { e.value = ''; return e.dispatchEvent(new Event('input')); })(document.getElementById('f-name'))`))
	until(t, ctx, "both are shown again", `!document.querySelector('tr[data-id="cli-3f2a"]').hidden`)
	// The create form makes a sandbox from a snapshot, with labels; its row
	// comes from the feed.
	until(t, ctx, "the snapshots are offered", `document.querySelectorAll('#c-snapshot option').length > 0`)
	do(t, ctx, "fill the create form", chromedp.SendKeys(`#c-name`, "from-ui"), chromedp.SendKeys(`#c-labels`, "team=a"),
		chromedp.Click(chromedp.CSS(`#c-submit`)))
	until(t, ctx, "from-ui started", rowState("from-ui")+` === 'started'`)
	if code, b := call(t, d, "GET", "/v1/sandboxes/from-ui", ""); code != 200 || !strings.Contains(string(b), `"team":"a"`) || !strings.Contains(string(b), `"origin":"dashboard"`) {
		t.Fatalf("the daemon's from-ui: %d %s", code, b)
	}
	call(t, d, "DELETE", "/v1/sandboxes/from-ui", "")
	until(t, ctx, "from-ui's row is gone", `document.querySelector('tr[data-id="from-ui"]') === null`)

	// The drawer shows web-7's details: its labels, the names of its
	// variables (never their values), its workspace, its times, and its
	// usage against its limits where the runtime meters it.
	do(t, ctx, "open web-7's details", chromedp.Click(chromedp.CSS(`tr[data-id="web-7"] button.name`)))
	web7 := get(t, d, "web-7")
	if web7.Workspace == "" || !slices.Contains(web7.EnvKeys, "STUB_AGENT_PRINT") {
		t.Fatalf("GET web-7: workspace %q, envKeys %q", web7.Workspace, web7.EnvKeys)
	}
	until(t, ctx, "the details name web-7's workspace", `document.getElementById('d-workspace')?.textContent === `+strconv.Quote(web7.Workspace))
	until(t, ctx, "the details name its variables", `document.getElementById('d-env').textContent.split(', ').includes('STUB_AGENT_PRINT')`)
	until(t, ctx, "the details show its labels and start", `document.getElementById('d-labels').textContent === 'origin=web-ui' && document.getElementById('d-started').textContent.includes('ago')`)
	if txt := value(t, ctx, "read the details", chromedp.Text(chromedp.CSS(`#details`))); strings.Contains(txt, "hello from web-7") {
		t.Errorf("the details show a variable's value: %q", txt)
	}
	if web7.Usage != nil {
		// Two reads, two seconds apart, make a rate.
		until(t, ctx, "CPU as a rate", `/^\d+(\.\d)?% of 1 CPU · \d+\.\d s in all$/.test(document.getElementById('d-cpu').textContent)`)
		until(t, ctx, "memory", `/^\d+(\.\d)? MiB of 512 MiB \(\d+%\)$/.test(document.getElementById('d-memory').textContent) && document.querySelector('#d-memory meter').max === 512 * 2**20`)
	}
	// The logs follow below the details.
	until(t, ctx, "the logs show the boot line", `document.getElementById('log').textContent.includes('hello from web-7')`)
	// Timestamped: each line's time is shown when asked, and is the time
	// the daemon dated it (an RFC 3339 time within the test's run).
	do(t, ctx, "show timestamps", chromedp.Click(chromedp.CSS(`#log-stamps`)))
	until(t, ctx, "a visible, valid timestamp on the boot line", `(() => {
		const l = [...document.querySelectorAll('#log .line')].find(s => s.textContent.includes('hello from web-7'));
		const ts = l && l.querySelector('.ts');
		if (!ts || getComputedStyle(ts).display === 'none') return false;
		const at = Date.parse(ts.textContent.trim());
		return /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z $/.test(ts.textContent) && Math.abs(Date.now() - at) < 600000;
	})()`)
	// The search hides the lines it does not match, and shows them again.
	do(t, ctx, "search the logs", chromedp.SendKeys(chromedp.CSS(`#log-search`), "no line says this"))
	until(t, ctx, "every line hidden", `[...document.querySelectorAll('#log .line:not(.meta)')].every(s => s.hidden)`)
	until(t, ctx, "clear the search", `(() => { const q = document.getElementById('log-search'); q.value = ''; q.dispatchEvent(new Event('input')); return true; })()`)
	until(t, ctx, "the boot line shown again", `[...document.querySelectorAll('#log .line')].some(s => !s.hidden && s.textContent.includes('hello from web-7'))`)
	// Download saves the lines with their times and streams (the blob is
	// caught before the browser saves it).
	until(t, ctx, "the download holds the dated lines", `(() => {
		if (window.__dl === undefined) {
			window.__dl = null;
			const made = URL.createObjectURL, click = HTMLAnchorElement.prototype.click;
			URL.createObjectURL = (b) => { URL.createObjectURL = made; b.text().then((t) => { window.__dl = t; }); return 'about:blank'; };
			HTMLAnchorElement.prototype.click = function () { HTMLAnchorElement.prototype.click = click; };
			document.getElementById('log-download').click();
		}
		return typeof window.__dl === 'string' && /^\d{4}-\d\d-\d\dT[\d:.]+Z stdout hello from web-7$/m.test(window.__dl);
	})()`)
	if os.Getenv("ACP_DASHBOARD_SCREENSHOT") != "" && web7.Usage != nil {
		// For the README's picture: usage comes with the next poll.
		until(t, ctx, "web-7's usage", `document.querySelector('tr[data-id="web-7"] td.col-usage').textContent.includes('%')`)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	png := value(t, ctx, "screenshot", chromedp.CaptureScreenshot())
	do(t, ctx, "close the drawer with Escape", chromedp.KeyEvent("\x1b"), chromedp.WaitNotVisible(chromedp.CSS(`#drawer`)))
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if dst := os.Getenv("ACP_DASHBOARD_SCREENSHOT"); dst != "" {
		os.WriteFile(dst, png, 0o644)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	// Correct across a daemon restart: the feed comes back by itself.
	d.Kill()
	until(t, ctx, "the page notices the daemon is gone", `document.getElementById('conn').textContent !== 'live'`)
	d.Start()
	create(t, d, `{"name":"after-restart","labels":{"origin":"harness"}}`)
	until(t, ctx, "a sandbox made after the restart appears", rowState("after-restart")+` === 'started'`)
	until(t, ctx, "web-7 is still there", rowState("web-7")+` === 'started'`)

	// Stop and Delete act on the daemon.
	do(t, ctx, "click Stop on web-7", chromedp.Click(chromedp.CSS(`tr[data-id="web-7"] button.act-stop`)))
	testenv.Eventually(t, "the daemon stopped web-7", func() bool { return get(t, d, "web-7").State == "stopped" })
	until(t, ctx, "web-7's row stopped", rowState("web-7")+` === 'stopped'`)
	// Start brings it back in place.
	do(t, ctx, "click Start on web-7", chromedp.Click(chromedp.CSS(`tr[data-id="web-7"] button.act-start`)))
	until(t, ctx, "web-7's row started again", rowState("web-7")+` === 'started'`)
	if sb := get(t, d, "web-7"); sb.State != "started" {
		t.Fatalf("the daemon says web-7 is %s after Start", sb.State)
	}
	do(t, ctx, "click Stop on web-7 again", chromedp.Click(chromedp.CSS(`tr[data-id="web-7"] button.act-stop`)))
	until(t, ctx, "web-7's row stopped again", rowState("web-7")+` === 'stopped'`)
	gone := func(id string) {
		t.Helper()
		testenv.Eventually(t, "the daemon deleted "+id, func() bool {
			code, _ := call(t, d, "GET", "/v1/sandboxes/"+id, "")
			return code == 404
		})
		until(t, ctx, id+"'s row is gone", `document.querySelector('tr[data-id="`+id+`"]') === null`)
	}

	// Restart is a stop and a start: a new workload, started again.
	before := get(t, d, "after-restart").StartedAt
	do(t, ctx, "click Restart on after-restart", chromedp.Click(chromedp.CSS(`tr[data-id="after-restart"] button.act-restart`)))
	testenv.Eventually(t, "after-restart started again", func() bool {
		sb := get(t, d, "after-restart")
		return sb.State == "started" && sb.StartedAt != before
	})
	until(t, ctx, "after-restart's row started", rowState("after-restart")+` === 'started'`)

	// Several at once: the two stopped ones ticked and deleted together.
	do(t, ctx, "tick web-7 and cli-3f2a", chromedp.Click(chromedp.CSS(`tr[data-id="web-7"] input.sel`)),
		chromedp.Click(chromedp.CSS(`tr[data-id="cli-3f2a"] input.sel`)))
	until(t, ctx, "two selected", `document.getElementById('sel-count').textContent === '2 sandboxes selected' && document.getElementById('bulk-stop').disabled`)
	do(t, ctx, "click Delete selected and confirm", chromedp.Click(chromedp.CSS(`#bulk-delete`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm button[value="ok"]`)))
	gone("web-7")
	gone("cli-3f2a")
	if code, _ := call(t, d, "GET", "/v1/sandboxes/after-restart", ""); code != 200 {
		t.Fatalf("the bulk delete took after-restart too: %d", code)
	}
	// Prune deletes the stopped ones shown, and only them.
	create(t, d, `{"name":"old-1"}`)
	waitState(t, d, "old-1", "started")
	call(t, d, "POST", "/v1/sandboxes/old-1/stop", "")
	until(t, ctx, "prune offers old-1", `document.getElementById('prune').textContent === 'Prune stopped (1)'`)
	do(t, ctx, "click Prune and confirm", chromedp.Click(chromedp.CSS(`#prune`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm button[value="ok"]`)))
	gone("old-1")
	// Delete on a running one stops it and removes it.
	do(t, ctx, "click Delete on after-restart and confirm", chromedp.Click(chromedp.CSS(`tr[data-id="after-restart"] button.act-delete`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm button[value="ok"]`)))
	gone("after-restart")

	// A page on another loopback port (a sandbox's preview, or any local
	// listener) gets nothing it could use: whatever the signed-in browser
	// sends it is replayed at the daemon, with and without the headers a
	// browser adds, and refused.
	var seen []http.Header
	var seenMu sync.Mutex
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		seen = append(seen, r.Header.Clone())
		seenMu.Unlock()
		w.Write([]byte("<p>spy</p>"))
	}))
	defer spy.Close()
	do(t, ctx, "visit another loopback port", chromedp.Navigate(spy.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`p`)))
	seenMu.Lock()
	got := seen
	seenMu.Unlock()
	if len(got) == 0 {
		t.Fatal("the spy saw no request")
	}
	for _, h := range got {
		for _, extra := range [][2]string{{}, {"Sec-Fetch-Site", "same-origin"}, {"Origin", d.URL}} {
			req, _ := http.NewRequest("GET", d.URL+"/v1/sandboxes", nil)
			for k, v := range h {
				req.Header[k] = v
			}
			if extra[0] != "" {
				req.Header.Set(extra[0], extra[1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("what the browser sent another port (%v) is accepted by the daemon: %d", h, res.StatusCode)
			}
		}
	}

	// A fresh browser with the used link: refused, how to get in, no
	// data.
	other := browser(t, exe)
	do(t, other, "open the used link", chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	until(t, other, "the page says the link is used", `document.getElementById('signin-error').textContent.includes('used already')`)
	body := value(t, other, "read the page", chromedp.Text(chromedp.CSS(`body`)))
	if !strings.Contains(body, "agent-control-plane dashboard") || strings.Contains(body, "web-7") {
		t.Errorf("with the used link, the page: %q", body)
	}
	do(t, other, "open the list without the link", chromedp.Navigate(d.URL+"/v1/sandboxes"))
	if list := value(t, other, "read the list", chromedp.Text(chromedp.CSS(`body`))); !strings.Contains(list, `"unauthorized"`) || strings.Contains(list, "web-7") {
		t.Errorf("without the link, the list: %q", list)
	}
}
