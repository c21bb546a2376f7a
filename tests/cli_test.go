// This file is long because its tests share one daemon per test and the
// CLI runner declared here.

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// cliCmd prepares the binary pointed at d, with its token.
func cliCmd(t *testing.T, d *testenv.Daemon, args ...string) *exec.Cmd {
	cmd := cliAtCmd(t, d.URL, args...)
	cmd.Env = append(cmd.Env, d.ClientEnv()...)
	return cmd
}

// cliAtCmd prepares the binary pointed at url, with no token.
func cliAtCmd(t *testing.T, url string, args ...string) *exec.Cmd {
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.Env = append(os.Environ(), "AGENT_CONTROL_PLANE_URL="+url, "NO_COLOR=1", "AGENT_CONTROL_PLANE_TOKEN=", "XDG_STATE_HOME="+t.TempDir())
	return cmd
}

func cli(t *testing.T, d *testenv.Daemon, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, cliCmd(t, d, args...))
}

func cliAt(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, cliAtCmd(t, url, args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// runAttached starts `run` and returns once it printed the sandbox line.
func runAttached(t *testing.T, d *testenv.Daemon, args ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	cmd := cliCmd(t, d, append([]string{"run"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("run ended before printing the sandbox; stderr:\n%s", stderr.String())
			}
			if id, ok := strings.CutPrefix(line, "Sandbox: "); ok {
				go func() {
					for range lines {
					}
				}()
				return cmd, id, &stderr
			}
		case <-time.After(60 * time.Second):
			t.Fatal("run printed no sandbox")
		}
	}
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatal("command did not exit")
	}
	return -1
}

func TestRunRmLeavesNothingAfterCtrlC(t *testing.T) {
	d := startDaemon(t)
	cmd, id, stderr := runAttached(t, d, "--rm", "--label", "test=run")
	info := get(t, d, id)
	if info.State != "started" {
		t.Fatalf("sandbox %s is %s while attached", id, info.State)
	}
	pid := childPID(t, d, id)
	cmd.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, cmd); code != 130 {
		t.Fatalf("exit code %d, stderr:\n%s", code, stderr)
	}
	if code, body := call(t, d, "GET", "/v1/sandboxes/"+id, ""); code != 404 {
		t.Fatalf("sandbox still there: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(d.Root, id)); !os.IsNotExist(err) {
		t.Fatal("sandbox directory left behind")
	}
	testenv.Eventually(t, "child gone", func() bool { return gone(pid) })
	if !strings.Contains(stderr.String(), "Deleted sandbox "+id) {
		t.Fatalf("stderr:\n%s", stderr)
	}
}

func TestRunWithoutRmLeavesSandboxRunning(t *testing.T) {
	d := startDaemon(t)
	cmd, id, stderr := runAttached(t, d, "--name", "kept")
	if id != "kept" {
		t.Fatalf("id %q", id)
	}
	var labels struct {
		Labels map[string]string `json:"labels"`
	}
	_, b := call(t, d, "GET", "/v1/sandboxes/kept", "")
	json.Unmarshal(b, &labels)
	if labels.Labels["origin"] != "cli" {
		t.Fatalf("labels %v", labels.Labels)
	}
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd)
	if info := get(t, d, "kept"); info.State != "started" {
		t.Fatalf("detached sandbox is %s", info.State)
	}
	if !strings.Contains(stderr.String(), "agent-control-plane rm kept") {
		t.Fatalf("no delete hint in:\n%s", stderr)
	}
}

// While attached, the sandbox is kept alive; if it stops anyway, run says
// why and fails.
func TestRunReportsStop(t *testing.T) {
	d := startDaemon(t)
	cmd, id, stderr := runAttached(t, d)
	call(t, d, "POST", "/v1/sandboxes/"+id+"/stop?force=true", "")
	if code := waitExit(t, cmd); code != 1 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "stopped") || strings.Contains(stderr.String(), "left running") || !strings.Contains(stderr.String(), "is not running") {
		t.Fatalf("stderr:\n%s", stderr)
	}
}

func TestCLICommands(t *testing.T) {
	d := startDaemon(t)
	if code, out, errs := cli(t, d, "create", "one", "--label", "team=a", "--env", "X=1", "--wait"); code != 0 || !strings.Contains(out, "Created sandbox one (started)") {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	code, out, _ := cli(t, d, "ls")
	if code != 0 || !strings.HasPrefix(out, "NAME  ") || !strings.Contains(out, "one ") || !strings.Contains(out, "team=a") {
		t.Fatalf("ls: %d\n%s", code, out)
	}
	code, out, _ = cli(t, d, "ls", "--json", "--label", "team=a")
	var list []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0]["id"] != "one" {
		t.Fatalf("ls --json: %d %s", code, out)
	}
	if code, out, _ := cli(t, d, "get", "one"); code != 0 || !strings.Contains(out, "State:") {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, out, _ := cli(t, d, "autostop", "one", "30"); code != 0 || !strings.Contains(out, "30 idle minutes") {
		t.Fatalf("autostop: %d %s", code, out)
	}
	if code, _, _ := cli(t, d, "keepalive", "one"); code != 0 {
		t.Fatalf("keepalive: %d", code)
	}
	if code, out, _ := cli(t, d, "logs", "one"); code != 0 || !strings.Contains(out, "listening on") {
		t.Fatalf("logs: %d %s", code, out)
	}
	if code, out, _ := cli(t, d, "info"); code != 0 || !strings.Contains(out, "Root:") {
		t.Fatalf("info: %d %s", code, out)
	}
	if code, _, _ := cli(t, d, "stop", "one"); code != 0 {
		t.Fatalf("stop: %d", code)
	}
	if code, out, _ := cli(t, d, "rm", "one"); code != 0 || out != "Deleted one\n" {
		t.Fatalf("rm: %d %q", code, out)
	}
	// Errors: one line with the API's code; documented exit codes.
	code, _, errs := cli(t, d, "get", "nope")
	if code != 1 || errs != "agent-control-plane: not_found: sandbox not found: nope\n" {
		t.Fatalf("get nope: %d %q", code, errs)
	}
	if code, _, _ := cli(t, d, "create"); code != 2 {
		t.Fatalf("create without a name: %d", code)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	code, _, errs = cliAt(t, dead, "ls")
	if code != 3 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "agent-control-plane ensure") {
		t.Fatalf("dead daemon: %d %q", code, errs)
	}
}

// A label, an error reason and a log full of terminal escapes print inert
// in text; --json keeps them exact.
func TestCLIControlCharactersInert(t *testing.T) {
	d := startDaemon(t)
	const evil = "\x1b]0;pwned\x07\x1b[2J\u009b31m\r\x7f"
	body, _ := json.Marshal(map[string]any{"name": "evil", "labels": map[string]string{"note": evil},
		"envVars": map[string]string{"STUB_AGENT_PRINT": evil}})
	if code, b := call(t, d, "POST", "/v1/sandboxes", string(body)); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	waitState(t, d, "evil", "started")
	for _, args := range [][]string{{"ls"}, {"get", "evil"}, {"logs", "evil"}} {
		code, out, errs := cli(t, d, args...)
		if code != 0 {
			t.Fatalf("%v: %d %q", args, code, errs)
		}
		for _, c := range []string{"\x1b", "\x07", "\u009b", "\r", "\x7f"} {
			if strings.Contains(out+errs, c) {
				t.Fatalf("%v printed a raw %q:\n%q", args, c, out)
			}
		}
		if !strings.Contains(out, `\e]0;pwned\x07\e[2J\u009b31m`) {
			t.Fatalf("%v does not show the escapes as text:\n%q", args, out)
		}
	}
	code, out, _ := cli(t, d, "get", "evil", "--json")
	var info struct{ Labels map[string]string }
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Labels["note"] != evil {
		t.Fatalf("get --json changed the label: %d %q", code, out)
	}
}

// redeem trades a code for a session as the page does; it returns the
// session's id, or "" when the daemon refused the code.
func redeem(t *testing.T, d *testenv.Daemon, code string) string {
	t.Helper()
	res, err := http.Post(d.URL+"/v1/dashboard/sessions", "application/json", strings.NewReader(`{"code":"`+code+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s struct{ ID, Secret string }
	json.NewDecoder(res.Body).Decode(&s)
	if res.StatusCode != http.StatusCreated {
		return ""
	}
	return s.ID
}

func TestWatchCommand(t *testing.T) {
	d := startDaemon(t)
	cmd := cliCmd(t, d, "watch", "--json")
	stdout, _ := cmd.StdoutPipe()
	cmd.Start()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"sandboxes_replaced"`) {
		t.Fatalf("first line %q", sc.Text())
	}
	call(t, d, "POST", "/v1/sandboxes", `{"name":"watched"}`)
	for _, want := range []string{"sandbox.created", "sandbox.started"} {
		if !sc.Scan() || !strings.Contains(sc.Text(), want) {
			t.Fatalf("want %s, got %q", want, sc.Text())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("watch exit %d", code)
	}
}

// configDaemon starts a daemon with a config file.
func configDaemon(t *testing.T, toml string) *testenv.Daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	lo, hi := portBlock.Next()
	return testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Args: []string{"--config", path}})
}

// Small things a person at the terminal meets (issue 14's list): each one
// answered plainly.
func TestCLIPlainAnswers(t *testing.T) {
	d := startDaemon(t)
	if code, out, errOut := cli(t, d, "create", "--wait", "one"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	// A filter that matches nothing is not an empty daemon.
	if _, out, _ := cli(t, d, "ls", "--label", "team=nobody"); !strings.Contains(out, "No sandboxes match") {
		t.Errorf("ls with a filter that matches nothing: %q", out)
	}
	// rm of names that do not exist says so and fails; it deletes the
	// ones that do.
	code, out, errOut := cli(t, d, "rm", "nope1", "one", "nope2")
	if code == 0 || strings.Contains(out, "Deleted nope") || !strings.Contains(errOut, "nope1") || !strings.Contains(errOut, "nope2") || !strings.Contains(out, "Deleted one") {
		t.Errorf("rm nope1 one nope2: %d %q %q", code, out, errOut)
	}
	cli(t, d, "create", "--wait", "two")
	// --json answers JSON for keepalive and rm.
	var ka map[string]any
	if _, out, _ := cli(t, d, "--json", "keepalive", "two"); json.Unmarshal([]byte(out), &ka) != nil || ka["id"] != "two" {
		t.Errorf("keepalive --json: %q", out)
	}
	// A stop says what it waits for; a stopped sandbox has no preview.
	if code, _, errOut := cli(t, d, "stop", "two"); code != 0 || !strings.Contains(errOut, "SIGTERM, then SIGKILL after") {
		t.Errorf("stop: %d %q", code, errOut)
	}
	if _, out, _ := cli(t, d, "get", "two"); strings.Contains(out, "Preview") {
		t.Errorf("get of a stopped sandbox shows a preview:\n%s", out)
	}
	var rm map[string][]string
	if _, out, _ := cli(t, d, "--json", "rm", "two"); json.Unmarshal([]byte(out), &rm) != nil || len(rm["deleted"]) != 1 {
		t.Errorf("rm --json: %q", out)
	}
	// One rule for minutes: ≥ 0, fractions allowed, on create and autostop.
	if code, _, errOut := cli(t, d, "create", "--autostop", "-5", "neg"); code != 2 || !strings.Contains(errOut, "minutes") {
		t.Errorf("create --autostop -5: %d %q", code, errOut)
	}
	if code, _, _ := cli(t, d, "get", "neg"); code == 0 {
		t.Error("a refused create made a sandbox")
	}
	if code, out, errOut := cli(t, d, "create", "--autostop", "0.5", "half"); code != 0 {
		t.Errorf("create --autostop 0.5: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, d, "autostop", "half", "1.5"); code != 0 || !strings.Contains(out, "1.5 idle minutes") {
		t.Errorf("autostop half 1.5: %d %q %q", code, out, errOut)
	}
	// --json errors are the API's error shape, on stderr.
	for _, args := range [][]string{{"--json", "get", "nope"}, {"--json", "resize", "x"}} {
		var body struct {
			Error struct{ Code, Message string }
		}
		code, out, errOut := cli(t, d, args...)
		if code == 0 || out != "" || json.Unmarshal([]byte(errOut), &body) != nil || body.Error.Code == "" || body.Error.Message == "" {
			t.Errorf("%q: %d stdout %q stderr %q", args, code, out, errOut)
		}
	}
	// --url takes host:port as people type it.
	if code, out, errOut := cliAt(t, d.Addr, "--token", d.Token, "info"); code != 0 || !strings.Contains(out, "Version") {
		t.Errorf("--url host:port: %d %q %q", code, out, errOut)
	}
}

// The generated completion scripts load, and bash (without the
// bash-completion package) completes commands, flags and, from the live
// daemon, sandbox names, snapshots and states.
func TestCompletion(t *testing.T) {
	d := startDaemon(t)
	cli(t, d, "create", "--wait", "alpha")
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := cli(t, d, "completion", sh)
		if code != 0 || !strings.Contains(out, "agent-control-plane") {
			t.Fatalf("completion %s: %d %s", sh, code, errOut)
		}
		if sh == "bash" {
			check := exec.Command("bash", "-n")
			check.Stdin = strings.NewReader(out)
			if b, err := check.CombinedOutput(); err != nil {
				t.Fatalf("bash -n: %v %s", err, b)
			}
		}
	}
	complete := func(words ...string) string {
		script := fmt.Sprintf(`source <(agent-control-plane completion bash); COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; __start_agent-control-plane; echo "${COMPREPLY[*]}"`,
			strings.Join(quoteAll(words), " "), len(words)-1)
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(testenv.Binary(t))+":"+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, "AGENT_CONTROL_PLANE_URL="+d.URL)
		cmd.Env = append(cmd.Env, d.ClientEnv()...)
		var stderr strings.Builder // compopt says it is called outside a completion
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash: %v %s", err, stderr.String())
		}
		return strings.TrimSpace(string(b))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"cre"}, "create"},
		{[]string{"ls", "--sta"}, "--state"},
		{[]string{"ls", "--state", "sto"}, "stopped"},
		{[]string{"rm", "al"}, "alpha"},
		{[]string{"exec", "al"}, "alpha"},
		{[]string{"create", "--snapshot", ""}, "default"},
		{[]string{"create", "--snapshot", "de"}, "default"},
		{[]string{"logs", "-f", ""}, "alpha"},
	} {
		if got := complete(append([]string{"agent-control-plane"}, c.words...)...); got != c.want {
			t.Errorf("complete %q: %q, want %q", c.words, got, c.want)
		}
	}
	// ls -q and --state, which completion and scripts lean on.
	if _, out, _ := cli(t, d, "ls", "-q"); out != "alpha\n" {
		t.Errorf("ls -q: %q", out)
	}
	if _, out, _ := cli(t, d, "ls", "--state", "stopped"); !strings.Contains(out, "No sandboxes match") {
		t.Errorf("ls --state stopped: %q", out)
	}
	if _, out, _ := cli(t, d, "ls", "-q", "--state", "started"); out != "alpha\n" {
		t.Errorf("ls -q --state started: %q", out)
	}
	if code, _, errOut := cli(t, d, "ls", "--state", "sleeping"); code != 2 {
		t.Errorf("ls --state sleeping: %d %q", code, errOut)
	}
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + w + "'"
	}
	return out
}

// Another HTTP server at --url is named as such, in one line, without its
// page.
func TestCLIAgainstANonDaemon(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "<html><body>"+strings.Repeat("<p>not here</p>\n", 50)+"</body></html>")
	}))
	defer srv.Close()
	for _, args := range [][]string{{"ls"}, {"get", "x"}} {
		code, _, errOut := cliAt(t, srv.URL, args...)
		if code == 0 || !strings.Contains(errOut, "is not an agent-control-plane daemon") || strings.Contains(errOut, "<html") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q at a web server: %d %q", args, code, errOut)
		}
	}
	// Something that is not HTTP at all: it closes at once, or it says
	// something else.
	for _, greet := range []string{"", "SSH-2.0-OpenSSH_9.2\r\n"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				// The request read first: a close with it unread would be
				// a reset, which says no daemon listens (also true).
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, greet)
				c.Close()
			}
		}()
		code, _, errOut := cliAt(t, "http://"+ln.Addr().String(), "ls")
		ln.Close()
		if code == 0 || !strings.Contains(errOut, "is not an agent-control-plane daemon") {
			t.Errorf("ls at a server that says %q: %d %q", greet, code, errOut)
		}
	}
}

// prune deletes stopped sandboxes, only those stopped long enough ago,
// never a running one, and does not act without --yes when it cannot ask.
func TestPrune(t *testing.T) {
	d := startDaemon(t)
	for _, n := range []string{"run1", "old1", "old2"} {
		cli(t, d, "create", "--wait", n)
	}
	cli(t, d, "stop", "--force", "old1")
	cli(t, d, "stop", "--force", "old2")
	if code, _, errOut := cli(t, d, "prune"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("prune without a terminal or --yes: %d %q", code, errOut)
	}
	if _, out, _ := cli(t, d, "prune", "--yes", "--older-than", "1h"); !strings.Contains(out, "Nothing to prune") {
		t.Errorf("prune --older-than 1h: %q", out)
	}
	var res map[string][]string
	if code, out, errOut := cli(t, d, "--json", "prune", "--yes"); code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res["deleted"]) != 2 {
		t.Fatalf("prune --yes: %d %q %q", code, out, errOut)
	}
	if _, out, _ := cli(t, d, "ls", "-q"); out != "run1\n" {
		t.Errorf("after prune: %q", out)
	}
}

// status --json (before or after the name) is JSON, as -h says.
func TestStatusJSON(t *testing.T) {
	d := startDaemon(t)
	for _, args := range [][]string{{"status", "--json"}, {"--json", "status"}} {
		code, out, errs := cli(t, d, args...)
		var st struct {
			Service struct{ Installed bool }
			Daemon  *struct{ PID int }
		}
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Daemon == nil || st.Daemon.PID == 0 {
			t.Errorf("%v: %d %q %q", args, code, out, errs)
		}
	}
}

// stop names the grace that applies to this sandbox (its snapshot's),
// and says nothing of stopping a sandbox that does not exist.
func TestStopSaysItsGrace(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: `
[snapshots.quick]
command = ["` + testenv.Binary(t) + `", "stub-agent"]
stop_grace = "2s"
`})
	if code, out, errs := cli(t, d, "create", "q1", "--snapshot", "quick", "--wait"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if code, _, errs := cli(t, d, "stop", "q1"); code != 0 || !strings.Contains(errs, "SIGKILL after 2s") {
		t.Errorf("stop q1: %d %q", code, errs)
	}
	if code, _, errs := cli(t, d, "stop", "nope"); code == 0 || strings.Contains(errs, "Stopping") || !strings.Contains(errs, "not_found") {
		t.Errorf("stop nope: %d %q", code, errs)
	}
}

// A stopped sandbox shows no stale port in ls or get, and get says when
// it started and stopped; keepalive says what it did; a typo gets the
// command meant.
func TestCLIConventions(t *testing.T) {
	d := startDaemon(t)
	if code, out, errs := cli(t, d, "create", "gone", "--wait"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	if code, out, _ := cli(t, d, "keepalive", "gone"); code != 0 || !strings.Contains(out, "Refreshed the activity of gone") {
		t.Errorf("keepalive: %d %q", code, out)
	}
	port := strconv.Itoa(get(t, d, "gone").Port)
	if code, _, errs := cli(t, d, "stop", "--force", "gone"); code != 0 {
		t.Fatalf("stop: %d %q", code, errs)
	}
	_, out, _ := cli(t, d, "ls")
	if strings.Contains(out, port) {
		t.Errorf("ls shows the stopped sandbox's old port %s:\n%s", port, out)
	}
	_, out, _ = cli(t, d, "get", "gone")
	if strings.Contains(out, port) || !strings.Contains(out, "Started:") || !strings.Contains(out, "Stopped:") {
		t.Errorf("get of a stopped sandbox:\n%s", out)
	}
	if code, _, errs := cli(t, d, "lss"); code != 2 || !strings.Contains(errs, "did you mean ls?") {
		t.Errorf("lss: %d %q", code, errs)
	}
}

// start brings a stopped sandbox back in place, its files kept; restart
// does the stop first; both wait with --wait. The daemon's binary is the
// real one, so this is the native runtime end to end.
func TestCLIStartAndRestart(t *testing.T) {
	d := startDaemon(t)
	if code, out, errs := cli(t, d, "create", "back", "--wait"); code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	file := filepath.Join(d.Root, "back", "workspace", "notes.txt")
	if err := os.WriteFile(file, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, d, "stop", "back"); code != 0 {
		t.Fatalf("stop: %d %q %q", code, out, errs)
	}
	code, out, errs := cli(t, d, "start", "back", "--wait")
	if code != 0 || !strings.Contains(out, "Started sandbox back (started)") {
		t.Fatalf("start: %d %q %q", code, out, errs)
	}
	sb := get(t, d, "back")
	if resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(sb.Port) + "/api/info"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the started sandbox does not answer: %v", err)
	} else {
		resp.Body.Close()
	}
	code, out, errs = cli(t, d, "restart", "back", "--wait")
	if code != 0 || !strings.Contains(out, "(started)") || !strings.Contains(errs, "Stopping sandbox back") {
		t.Fatalf("restart: %d %q %q", code, out, errs)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "kept" {
		t.Fatalf("the workspace's file after start and restart: %q %v", b, err)
	}
	if code, _, errs := cli(t, d, "start", "nope"); code == 0 || !strings.Contains(errs, "not_found") {
		t.Errorf("start nope: %d %q", code, errs)
	}
	// rm of a running sandbox says it stops it first.
	if code, out, errs := cli(t, d, "rm", "back"); code != 0 || out != "Deleted back\n" || !strings.Contains(errs, "is running: stopping it first") {
		t.Errorf("rm of a running sandbox: %d %q %q", code, out, errs)
	}
}

// Every interval flag takes what --autostop takes (minutes, or a duration)
// and says so when it cannot read one.
func TestIntervalsOneUnit(t *testing.T) {
	d := startDaemon(t)
	for _, args := range [][]string{{"keepalive", "x", "--every", "5x"}, {"prune", "--older-than", "soon"}, {"create", "x", "--autostop", "-1"}} {
		if code, _, errs := cli(t, d, args...); code != 2 || !strings.Contains(errs, "want minutes (e.g. 15 or 0.5) or a duration") {
			t.Errorf("%v: %d %q", args, code, errs)
		}
	}
	if code, out, errs := cli(t, d, "prune", "--older-than", "0.5", "--yes"); code != 0 {
		t.Errorf("prune --older-than 0.5: %d %q %q", code, out, errs)
	}
	if code, out, errs := cli(t, d, "create", "x", "--autostop", "90s", "--json"); code != 0 || !strings.Contains(out, `"autoStopInterval": 1.5`) {
		t.Errorf("create --autostop 90s: %d %q %q", code, out, errs)
	}
}

// The CLI finds a daemon on another address than the default with no
// flag and no variable: the daemon writes its address beside its token,
// where the CLI looks; the file goes with the daemon. A miss names the
// flag and the variable that point the CLI elsewhere.
func TestCLIFindsItsDaemon(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, TokenFile: true})
	if strings.HasSuffix(d.URL, ":4025") {
		t.Fatalf("the daemon listens on the default address %s: nothing to find", d.URL)
	}
	cmd := exec.Command(testenv.Binary(t), "ls")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+d.State, "AGENT_CONTROL_PLANE_URL=", "AGENT_CONTROL_PLANE_TOKEN=", "NO_COLOR=1")
	if code, out, errs := runCmd(t, cmd); code != 0 {
		t.Fatalf("ls with no address given: %d %q %q", code, out, errs)
	}
	addr := filepath.Join(d.State, "agent-control-plane", "address")
	if b, err := os.ReadFile(addr); err != nil || strings.TrimSpace(string(b)) != d.URL {
		t.Fatalf("the address file: %q %v, want %s", b, err, d.URL)
	}
	d.Signal(syscall.SIGTERM)
	testenv.Eventually(t, "the address file is removed with its daemon", func() bool {
		_, err := os.Stat(addr)
		return os.IsNotExist(err)
	})
	code, _, errs := cliAt(t, "http://127.0.0.1:1", "ls")
	if code == 0 || !strings.Contains(errs, "--url") || !strings.Contains(errs, "AGENT_CONTROL_PLANE_URL") {
		t.Fatalf("a miss: %d %q", code, errs)
	}
}

// With nothing else to go by (no flag, no variable, no address file in
// the default place), the CLI reads the configuration serve would run
// with: the address written beside the token file it names, else its
// listen address, and that token file's token.
func TestCLIFindsItsDaemonByItsConfig(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, TokenFile: true})
	tokenFile := filepath.Join(d.State, "agent-control-plane", "token")
	elsewhere := t.TempDir() // the CLI's own default places: empty
	run := func(config string, env ...string) (int, string) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "config.toml")
		os.WriteFile(file, []byte(config), 0o600)
		cmd := exec.Command(testenv.Binary(t), "ls", "-q")
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+elsewhere, "XDG_CONFIG_HOME="+elsewhere, "HOME="+elsewhere,
			"AGENT_CONTROL_PLANE_URL=", "AGENT_CONTROL_PLANE_TOKEN=", "AGENT_CONTROL_PLANE_CONFIG="+file)
		cmd.Env = append(cmd.Env, env...)
		code, _, errs := runCmd(t, cmd)
		return code, errs
	}
	// The address beside the token file the config names.
	if code, errs := run(fmt.Sprintf("token_file = %q\n", tokenFile)); code != 0 {
		t.Errorf("by the config's token file: %d %q", code, errs)
	}
	// The config's listen address (the token given apart).
	listen := strings.TrimPrefix(d.URL, "http://")
	if code, errs := run(fmt.Sprintf("listen = %q\n", listen), "AGENT_CONTROL_PLANE_TOKEN="+d.Token); code != 0 {
		t.Errorf("by the config's listen address: %d %q", code, errs)
	}
}

// What the CLI says is true: an opener's failure is reported, more CPUs
// than the machine has are refused naming the range, a stop of a stopped
// sandbox says it was stopped already, one is one, and a name taken by a
// running sandbox is not blamed on a stopped one.
func TestCLITellsTheTruth(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "truth", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	cmd := cliCmd(t, d, "open", "truth")
	cmd.Env = append(cmd.Env, "BROWSER=false")
	if code, out, errs := runCmd(t, cmd); code == 0 || strings.Contains(out, "Opened") || !strings.Contains(errs, "failed") {
		t.Fatalf("open with an opener that fails: %d %q %q", code, out, errs)
	}
	if code, _, errs := cli(t, d, "create", "truth"); code == 0 || !strings.Contains(errs, "is started") || strings.Contains(errs, "start it again") {
		t.Fatalf("a name taken by a running sandbox: %d %q", code, errs)
	}
	if code, out, errs := cli(t, d, "resize", "truth", "--cpu", "100"); code == 0 || !strings.Contains(errs, "CPUs of this machine") {
		t.Fatalf("more CPUs than the machine has: %d %q %q", code, out, errs)
	}
	if code, out, _ := cli(t, d, "stop", "truth"); code != 0 || !strings.Contains(out, "Stopped truth") {
		t.Fatalf("stop: %d %q", code, out)
	}
	if code, out, _ := cli(t, d, "stop", "truth"); code != 0 || !strings.Contains(out, "already") || strings.Contains(out, "SIGTERM") {
		t.Fatalf("stop of a stopped sandbox: %d %q", code, out)
	}
	if code, _, errs := cli(t, d, "create", "truth"); code == 0 || !strings.Contains(errs, "stopped") || !strings.Contains(errs, "start it again") {
		t.Fatalf("a name taken by a stopped sandbox: %d %q", code, errs)
	}
	if code, _, errs := cli(t, d, "prune"); code == 0 || !strings.Contains(errs, "1 stopped sandbox would") {
		t.Fatalf("prune of one: %d %q", code, errs)
	}
}

// watch keeps running through an outage of the daemon and says so, on
// stderr, when it loses the daemon and when it has it again; the events
// of a sandbox made meanwhile follow.
func TestWatchThroughAnOutage(t *testing.T) {
	d := startDaemon(t)
	cmd := cliCmd(t, d, "watch")
	stdout, _ := cmd.StdoutPipe()
	var said lockedBuilder
	cmd.Stderr = &said
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if line := <-lines; !strings.Contains(line, "0 sandboxes") {
		t.Fatalf("first line %q", line)
	}
	saw := func(what string) {
		t.Helper()
		testenv.Eventually(t, "watch says "+what, func() bool { return strings.Contains(said.String(), what) })
	}
	d.Kill()
	saw("lost the daemon")
	d.Start()
	saw("reconnected")
	call(t, d, "POST", "/v1/sandboxes", `{"name":"after"}`)
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line := <-lines:
			if strings.Contains(line, "after") {
				return
			}
		case <-deadline:
			t.Fatal("no event of the sandbox made after the outage")
		}
	}
}

// stats shows each live sandbox's use, once (--no-stream, also as JSON)
// or sample after sample; a stopped one is not in it.
func TestStatsCommand(t *testing.T) {
	d := startDaemon(t)
	for _, name := range []string{"busy", "idle"} {
		if code, _, errs := cli(t, d, "create", name, "--wait"); code != 0 {
			t.Fatalf("create: %d %s", code, errs)
		}
	}
	cli(t, d, "stop", "idle")
	code, out, errs := cli(t, d, "stats", "--no-stream")
	if code != 0 || !strings.Contains(out, "MEM USAGE / LIMIT") || !strings.Contains(out, "busy") || strings.Contains(out, "idle") {
		t.Fatalf("stats --no-stream: %d %q %q", code, out, errs)
	}
	code, out, _ = cli(t, d, "stats", "--no-stream", "--json")
	var rows []struct {
		Name        string
		MemoryBytes int64
		Tasks       int64
		Port        int
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 1 || rows[0].Name != "busy" || rows[0].Port == 0 {
		t.Fatalf("stats --json: %d %q %v", code, out, err)
	}
	if rows[0].Tasks > 0 && rows[0].MemoryBytes <= 0 { // where the runtime says what it uses
		t.Errorf("a sandbox with %d tasks uses no memory: %+v", rows[0].Tasks, rows[0])
	}
	cmd := cliCmd(t, d, "stats")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	headers := 0
	for headers < 2 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "NAME") {
			headers++
		}
	}
	if headers < 2 {
		t.Fatalf("stats streamed %d samples", headers)
	}
}
