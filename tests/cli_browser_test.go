package tests

import (
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// dashboard prints a one-time link: the code in its fragment, traded for
// a session once; --sessions lists the session and --revoke ends it.
func TestDashboardLink(t *testing.T) {
	d := startDaemon(t)
	code, out, errs := cli(t, d, "dashboard")
	link := strings.TrimSpace(out)
	codeText, ok := strings.CutPrefix(link, d.URL+"/#code=")
	if code != 0 || !ok || strings.Contains(link, d.Token) || !strings.Contains(errs, "once, within a minute") {
		t.Fatalf("dashboard: %d %q %q", code, out, errs)
	}
	if id := redeem(t, d, codeText); id == "" {
		t.Fatal("the link did not sign in")
	}
	if id := redeem(t, d, codeText); id != "" {
		t.Fatal("the link signed in twice")
	}
	code, out, _ = cli(t, d, "dashboard", "--sessions")
	if code != 0 || !strings.Contains(out, "Go-http-client") {
		t.Fatalf("dashboard --sessions: %d %q", code, out)
	}
	if code, out, _ = cli(t, d, "dashboard", "--revoke", "all"); code != 0 || !strings.Contains(out, "Signed out every browser") {
		t.Fatalf("dashboard --revoke all: %d %q", code, out)
	}
	if code, out, _ = cli(t, d, "dashboard", "--sessions"); code != 0 || !strings.Contains(out, "No browser is signed in") {
		t.Fatalf("dashboard --sessions after revoke: %d %q", code, out)
	}
}

// dashboard --open starts the browser with no secret in its argv (which
// every local user can read): it gets a private file that forwards it
// to the link, removed once the link was used.
func TestDashboardOpen(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	opener := filepath.Join(dir, "browser")
	// The fake browser records its argv and what it was given, then
	// leaves; the test plays the page.
	script := "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > " + dir + "/argv\nstat -c %a \"$1\" > " + dir + "/mode\ncp \"$1\" " + dir + "/page.html\n"
	if err := os.WriteFile(opener, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := cliCmd(t, d, "dashboard", "--open")
	cmd.Env = append(cmd.Env, "BROWSER="+opener)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var page []byte
	testenv.Eventually(t, "the browser was started", func() bool {
		page, _ = os.ReadFile(filepath.Join(dir, "page.html"))
		return len(page) > 0
	})
	argv, _ := os.ReadFile(filepath.Join(dir, "argv"))
	mode, _ := os.ReadFile(filepath.Join(dir, "mode"))
	m := regexp.MustCompile(`url=([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("the page does not forward to the link: %s", page)
	}
	link := html.UnescapeString(string(m[1]))
	codeText, ok := strings.CutPrefix(link, d.URL+"/#code=")
	if !ok || strings.Contains(string(argv), codeText) || strings.Contains(string(argv), d.Token) || strings.TrimSpace(string(mode)) != "600" {
		t.Fatalf("link %q; the browser's argv %q; the file's mode %s", link, argv, mode)
	}
	given := strings.Split(strings.TrimSpace(string(argv)), "\n")[1]
	if redeem(t, d, codeText) == "" {
		t.Fatal("the link did not sign in")
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "Signed in.") {
		t.Fatalf("dashboard --open: %v %q %q", err, out.String(), errb.String())
	}
	if _, err := os.Stat(given); !os.IsNotExist(err) {
		t.Fatalf("the file given to the browser is still there: %v", err)
	}
}

// open hands a running sandbox's preview to the browser; a stopped one
// has none.
func TestOpenPreview(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	opener := filepath.Join(dir, "browser")
	os.WriteFile(opener, []byte("#!/bin/sh\nprintf '%s\\n' \"$1\" > "+dir+"/opened\n"), 0o755)
	if code, out, errs := cli(t, d, "create", "web", "--wait"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	cmd := cliCmd(t, d, "open", "web")
	cmd.Env = append(cmd.Env, "BROWSER="+opener)
	if code, out, errs := runCmd(t, cmd); code != 0 || !strings.Contains(out, "Opened http://127.0.0.1:") {
		t.Fatalf("open: %d %q %q", code, out, errs)
	}
	want := "http://127.0.0.1:" + strconv.Itoa(get(t, d, "web").Port)
	testenv.Eventually(t, "the browser got the preview", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "opened"))
		return strings.TrimSpace(string(b)) == want
	})
	cli(t, d, "stop", "--force", "web")
	if code, _, errs := cli(t, d, "open", "web"); code == 0 || !strings.Contains(errs, "no preview") {
		t.Errorf("open of a stopped sandbox: %d %q", code, errs)
	}
}
