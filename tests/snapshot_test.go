package tests

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// contribSnapshots is every example of contrib/snapshots, as one config.
func contribSnapshots(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("../contrib/snapshots/*.toml")
	if err != nil || len(files) < 3 {
		t.Fatalf("contrib/snapshots: %v %v", files, err)
	}
	var b strings.Builder
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(text)
		b.WriteString("\n")
	}
	return b.String()
}

// fetch GETs a sandbox's port and returns the body of a 200.
func fetch(t *testing.T, port int, path string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Get("http://127.0.0.1:" + strconv.Itoa(port) + path)
	if err != nil {
		t.Fatalf("GET :%d%s: %v", port, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET :%d%s: %d %s", port, path, res.StatusCode, b)
	}
	return string(b)
}

// Snapshots side by side, from the config file at its default location
// (contrib/snapshots' examples): the bundled stub, a real Python HTTP
// server, and a real Node.js one where node is installed, each answering on
// its own port. The snapshot survives a restart with a config that no
// longer has it.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestSnapshotsSideBySide(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the test runs contrib/snapshots/python-http.toml for real")
	}
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: contribSnapshots(t)})

	code, b := call(t, d, "GET", "/v1/snapshots", "")
	var list wire.SnapshotList
	if code != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("GET /v1/snapshots: %d %s", code, b)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
		if s.Name == "python-http" && (s.ReadyPath != "/" || s.Runtime != "native" || !slices.Equal(s.EnvKeys, []string{"PYTHONUNBUFFERED"}) || s.StopGraceMs != 2000) {
			t.Errorf("python-http listed as %+v", s)
		}
		if s.Name == "default" && !s.Default {
			t.Error("default not marked as the default")
		}
	}
	if !slices.Equal(names, []string{"default", "node-http", "opencode", "python-http"}) {
		t.Errorf("snapshots %v", names)
	}
	if strings.Contains(string(b), `"1"`) || strings.Contains(string(b), "http.server") {
		t.Errorf("GET /v1/snapshots shows env values or commands: %s", b)
	}

	create := func(name, snapshot string) {
		t.Helper()
		code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"`+name+`","snapshot":"`+snapshot+`"}`)
		if code != 201 {
			t.Fatalf("create %s from %q: %d %s", name, snapshot, code, b)
		}
	}
	create("stub1", "")
	create("py1", "python-http")
	_, nodeErr := exec.LookPath("node")
	if nodeErr == nil {
		create("node1", "node-http")
	}
	stub, py := waitState(t, d, "stub1", "started"), waitState(t, d, "py1", "started")
	if !strings.Contains(fetch(t, stub.Port, "/api/info"), "stub") {
		t.Error("the stub does not answer as the stub")
	}
	os.WriteFile(filepath.Join(d.Root, "py1", "workspace", "hello.txt"), []byte("served from the workspace\n"), 0o644)
	if got := fetch(t, py.Port, "/hello.txt"); got != "served from the workspace\n" {
		t.Errorf("python-http served %q", got)
	}
	if nodeErr == nil {
		node := waitState(t, d, "node1", "started")
		if got := fetch(t, node.Port, "/"); got != "hello from node1\n" {
			t.Errorf("node-http answered %q", got)
		}
	} else {
		t.Log("node is not installed: node-http not run")
	}

	code, b = call(t, d, "POST", "/v1/sandboxes", `{"name":"u1","snapshot":"nope"}`)
	if code != 400 || !strings.Contains(string(b), `"unknown_snapshot"`) || !strings.Contains(string(b), "default, node-http, opencode, python-http") {
		t.Errorf("unknown snapshot: %d %s", code, b)
	}

	// Restarted without the config file: py1 is adopted as it was made.
	if r := record(t, d, "py1"); r.Snapshot != "python-http" || r.ReadyPath != "/" || r.StopGraceMs != 2000 {
		t.Errorf("record: snapshot %q, readyPath %q, grace %d", r.Snapshot, r.ReadyPath, r.StopGraceMs)
	}
	d.Kill()
	os.Remove(filepath.Join(d.ConfigHome, "agent-control-plane", "config.toml"))
	d.Start()
	if info := get(t, d, "py1"); info.State != "started" {
		t.Fatalf("py1 after a restart: %s", info.State)
	}
	code, b = call(t, d, "GET", "/v1/sandboxes/py1", "")
	if !strings.Contains(string(b), `"snapshot":"python-http"`) {
		t.Errorf("py1 after a restart: %d %s", code, b)
	}
	if got := fetch(t, py.Port, "/hello.txt"); got != "served from the workspace\n" {
		t.Errorf("python-http after a restart served %q", got)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes/py1/stop", ""); code != 200 {
		t.Fatalf("stop py1: %d %s", code, b)
	}
	if info := get(t, d, "py1"); info.State != "stopped" || info.ErrorReason != "" {
		t.Errorf("py1 stopped as %s %q", info.State, info.ErrorReason)
	}
}

// The CLI: config shows the file it found and where each value came from;
// snapshots lists them; create --snapshot runs one; logs -f shows a line
// written after it started, and ends when the sandbox stops.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestCLISnapshotsConfigAndFollow(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the test runs contrib/snapshots/python-http.toml for real")
	}
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: contribSnapshots(t)})

	cfg := exec.Command(testenv.Binary(t), "config", "--port-range", "5000-5099")
	cfg.Env = append(os.Environ(), "XDG_CONFIG_HOME="+d.ConfigHome, "AGENT_CONTROL_PLANE_CONFIG=", "AGENT_CONTROL_PLANE_LOG_LEVEL=debug")
	code, out, errOut := runCmd(t, cfg)
	file := filepath.Join(d.ConfigHome, "agent-control-plane", "config.toml")
	for _, want := range []string{
		"# config file: " + file,
		`port_range = "5000-5099"`, "# flag --port-range",
		`log_level = "debug"`, "# env AGENT_CONTROL_PLANE_LOG_LEVEL",
		"[snapshots.python-http]", `ready_path = "/"`,
		`env = { PYTHONUNBUFFERED = "(hidden)" }`,
		`listen = "127.0.0.1:4025"`,
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("config lacks %q: %d %s %s", want, code, out, errOut)
		}
	}

	cfg = exec.Command(testenv.Binary(t), "--json", "config")
	cfg.Env = append(os.Environ(), "XDG_CONFIG_HOME="+d.ConfigHome, "AGENT_CONTROL_PLANE_CONFIG=", "AGENT_CONTROL_PLANE_TOKEN=0123456789abcdef0123456789abcdef")
	code, out, errOut = runCmd(t, cfg)
	var settings struct {
		File     string
		Settings []struct{ Key, Value, Origin string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &settings) != nil || settings.File != file {
		t.Fatalf("--json config: %d %s %s", code, out, errOut)
	}
	for _, s := range settings.Settings {
		if s.Key == "token" && (s.Value != `"(hidden)"` || s.Origin != "env AGENT_CONTROL_PLANE_TOKEN") {
			t.Errorf("--json config shows the token as %s (%s)", s.Value, s.Origin)
		}
	}
	if strings.Contains(out, "0123456789abcdef") {
		t.Error("--json config shows the token")
	}
	bad := exec.Command(testenv.Binary(t), "--json", "config", "--port-range", "9-1")
	bad.Env = cfg.Env
	if code, _, errOut := runCmd(t, bad); code != 2 || !strings.Contains(errOut, `{"error":{"code":"usage"`) {
		t.Errorf("--json config with a bad range: %d %s", code, errOut)
	}

	code, out, errOut = cli(t, d, "snapshots")
	if code != 0 || !strings.Contains(out, "default (default)") || !strings.Contains(out, "python-http") || !strings.Contains(out, "PYTHONUNBUFFERED") {
		t.Fatalf("snapshots: %d %s %s", code, out, errOut)
	}
	if code, _, errOut = cli(t, d, "create", "--snapshot", "nope", "x"); code == 0 || !strings.Contains(errOut, "unknown_snapshot") {
		t.Fatalf("create --snapshot nope: %d %s", code, errOut)
	}
	if code, out, errOut = cli(t, d, "create", "--snapshot", "python-http", "--wait", "web"); code != 0 || !strings.Contains(errOut, "probes / on port") {
		t.Fatalf("create --snapshot python-http --wait: %d %s %s", code, out, errOut)
	}
	web := get(t, d, "web")

	follow := cliCmd(t, d, "logs", "-f", "web")
	stderr, _ := follow.StderrPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// http.server logs each request on stderr: a request made after
	// logs -f started shows up in it. Requests repeat until one is seen
	// (the follower may not have subscribed when the first is logged,
	// and its tail may not reach back to it).
	seen := false
	deadline := time.After(time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !seen {
		select {
		case line := <-lines:
			seen = strings.Contains(line, "GET /after-follow-started")
		case <-tick.C:
			http.Get("http://127.0.0.1:" + strconv.Itoa(web.Port) + "/after-follow-started")
		case <-deadline:
			t.Fatal("logs -f never showed a request made after it started")
		}
	}
	if code, _, errOut := cli(t, d, "stop", "web"); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	// Everything it printed is read before Wait, which closes the pipe.
	var rest strings.Builder
	for open := true; open; {
		select {
		case line, ok := <-lines:
			rest.WriteString(line + "\n")
			open = ok
		case <-time.After(time.Minute):
			t.Fatalf("logs -f did not end at the stop; it printed %q", rest.String())
		}
	}
	if code := waitExit(t, follow); code != 0 {
		t.Fatalf("logs -f ended with %d at the stop", code)
	}
	if !strings.Contains(rest.String(), "Sandbox web is stopped") {
		t.Errorf("logs -f did not say the sandbox stopped: %q", rest.String())
	}
}

// Snapshots reload on SIGHUP; a set the daemon cannot run leaves the old
// one in force, and says so.
func TestSnapshotsReloadOnSIGHUP(t *testing.T) {
	stub := testenv.StubArgv(t)
	snapshot := func(name string) string {
		return "[snapshots." + name + "]\ncommand = [\"" + stub[0] + "\", \"stub-agent\"]\n"
	}
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: snapshot("first")})
	names := func() string {
		_, b := call(t, d, "GET", "/v1/snapshots", "")
		var list wire.SnapshotList
		json.Unmarshal(b, &list)
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(); got != "default,first" {
		t.Fatalf("snapshots %s", got)
	}
	file := filepath.Join(d.ConfigHome, "agent-control-plane", "config.toml")
	os.WriteFile(file, []byte(snapshot("second")), 0o600)
	d.Signal(syscall.SIGHUP)
	testenv.Eventually(t, "the new snapshots in force", func() bool { return names() == "default,second" })
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"s2","snapshot":"second"}`); code != 201 {
		t.Fatalf("create from the reloaded snapshot: %d %s", code, b)
	}
	os.WriteFile(file, []byte("[snapshots.broken]\nready_path = \"/\"\n"), 0o600) // native, no command
	d.Signal(syscall.SIGHUP)
	testenv.Eventually(t, "the refusal logged", func() bool { return strings.Contains(d.Log(), "the snapshots stay as they were") })
	if got := names(); got != "default,second" {
		t.Errorf("after a bad reload: %s", got)
	}
}
