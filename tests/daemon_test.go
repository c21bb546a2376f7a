// Package tests holds end-to-end tests that drive the built binary.
package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// End-to-end tests lease sandbox ports from 24000 up.
var portBlock = testenv.PortBlock{Base: 24000, Size: 40}

type sandboxInfo struct {
	ID          string      `json:"id"`
	State       string      `json:"state"`
	Port        int         `json:"port"`
	ErrorReason string      `json:"errorReason"`
	CPU         float64     `json:"cpu"`
	Memory      float64     `json:"memory"`
	Pids        int64       `json:"pids"`
	Usage       *wire.Usage `json:"usage"`
	Workspace   string      `json:"workspace"`
	EnvKeys     []string    `json:"envKeys"`
	StartedAt   string      `json:"startedAt"`
}

func call(t *testing.T, d *testenv.Daemon, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, d.URL+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := d.HTTP(30 * time.Second).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func get(t *testing.T, d *testenv.Daemon, id string) sandboxInfo {
	t.Helper()
	code, b := call(t, d, "GET", "/v1/sandboxes/"+id, "")
	var info sandboxInfo
	if code != 200 || json.Unmarshal(b, &info) != nil {
		t.Fatalf("get %s: %d %s", id, code, b)
	}
	return info
}

func waitState(t *testing.T, d *testenv.Daemon, id, state string) sandboxInfo {
	t.Helper()
	var info sandboxInfo
	testenv.Eventually(t, id+" "+state, func() bool { info = get(t, d, id); return info.State == state })
	return info
}

func startDaemon(t *testing.T, env ...string) *testenv.Daemon {
	lo, hi := portBlock.Next()
	return testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: env})
}

// record reads a sandbox's record through the daemon's own decoder.
func record(t *testing.T, d *testenv.Daemon, id string) supervisor.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.Root, id, supervisor.RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	r, err := supervisor.DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// childPID is the pid of a native sandbox's child, as its record names it;
// never 0 or less (kill(0) would signal the test's own group).
func childPID(t *testing.T, d *testenv.Daemon, id string) int {
	t.Helper()
	r := record(t, d, id)
	if r.Handle == nil {
		t.Fatalf("%s: record has no handle", id)
	}
	pid, err := native.PID(*r.Handle)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return pid
}

func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || bytes.Contains(b, []byte(") Z "))
}

// A daemon killed with -9 and restarted re-adopts its live children on the
// same ports and flips the dead ones to stopped.
func TestDaemonKill9Restart(t *testing.T) {
	d := startDaemon(t)
	for _, id := range []string{"keep1", "keep2", "dies"} {
		if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"`+id+`"}`); code != 201 {
			t.Fatalf("create %s: %d %s", id, code, b)
		}
	}
	before := map[string]sandboxInfo{}
	for _, id := range []string{"keep1", "keep2", "dies"} {
		before[id] = waitState(t, d, id, "started")
	}
	d.Kill()
	// Children outlive the daemon by design.
	for id, info := range before {
		if gone(childPID(t, d, id)) {
			t.Fatalf("%s died with the daemon", id)
		}
		_ = info
	}
	dies, diesMarker := childPID(t, d, "dies"), record(t, d, "dies").Marker
	syscall.Kill(dies, syscall.SIGKILL)
	testenv.Eventually(t, "child gone", func() bool { return gone(dies) })

	d.Start()
	for _, id := range []string{"keep1", "keep2"} {
		info := get(t, d, id)
		if info.State != "started" || info.Port != before[id].Port {
			t.Fatalf("%s after restart: %+v, want started on %d", id, info, before[id].Port)
		}
		if _, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", info.Port), time.Second); err != nil {
			t.Fatalf("%s not serving after restart: %v", id, err)
		}
	}
	if info := get(t, d, "dies"); info.State != "stopped" || info.ErrorReason != "exited; status unknown" {
		t.Fatalf("dead child after restart: %+v", info)
	}
	// Nothing of it is left (an isolated sandbox's pasta outlives its
	// init until a daemon sweeps it).
	testenv.Eventually(t, "nothing carries the dead sandbox's marker", func() bool { return len(testenv.Marked(diesMarker)) == 0 })
	// A re-adopted child's crash is still seen without polling.
	keep1 := childPID(t, d, "keep1")
	syscall.Kill(keep1, syscall.SIGKILL)
	info := waitState(t, d, "keep1", "stopped")
	if info.ErrorReason != "exited; status unknown" {
		t.Fatalf("re-adopted crash reason %q", info.ErrorReason)
	}
	// Stopping a re-adopted child stops it.
	keep2 := childPID(t, d, "keep2")
	if code, b := call(t, d, "POST", "/v1/sandboxes/keep2/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	testenv.Eventually(t, "keep2 gone", func() bool { return gone(keep2) })
}

// SIGTERM stops the daemon, not the children, unless REAP_ON_EXIT is set.
func TestDaemonSignalLeavesChildren(t *testing.T) {
	for _, reap := range []bool{false, true} {
		t.Run(fmt.Sprintf("reap=%v", reap), func(t *testing.T) {
			var env []string
			if reap {
				env = append(env, "AGENT_CONTROL_PLANE_REAP_ON_EXIT=1")
			}
			d := startDaemon(t, env...)
			call(t, d, "POST", "/v1/sandboxes", `{"name":"child"}`)
			waitState(t, d, "child", "started")
			pid := childPID(t, d, "child")
			d.Signal(syscall.SIGTERM)
			code, ok := d.Wait(60 * time.Second)
			if !ok || code != 0 {
				t.Fatalf("daemon exit: %d %v\n%s", code, ok, d.Log())
			}
			if reap {
				testenv.Eventually(t, "child reaped", func() bool { return gone(pid) })
			} else if gone(pid) {
				t.Fatal("child died with the daemon")
			}
		})
	}
}

// SIGHUP never ends the daemon: it reloads what it can (here the log
// level and the token, rotated in its file) and keeps its children.
func TestDaemonSurvivesSIGHUP(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, TokenFile: true})
	call(t, d, "POST", "/v1/sandboxes", `{"name":"child"}`)
	waitState(t, d, "child", "started")
	pid := childPID(t, d, "child")
	old := d.Token
	rotated := testenv.NewToken()
	tokenFile := filepath.Join(d.State, "agent-control-plane", "token")
	if err := os.WriteFile(tokenFile, []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		d.Signal(syscall.SIGHUP)
	}
	testenv.Eventually(t, "the rotated token in force", func() bool {
		code, _ := call(t, d, "GET", "/v1/sandboxes", "")
		return code == 401
	})
	d.Token = rotated
	if code, b := call(t, d, "GET", "/v1/sandboxes/child", ""); code != 200 || !strings.Contains(string(b), `"started"`) {
		t.Fatalf("after SIGHUP: %d %s", code, b)
	}
	if _, ok := d.Wait(0); ok {
		t.Fatalf("the daemon exited on SIGHUP:\n%s", d.Log())
	}
	if gone(pid) {
		t.Fatal("the child died on SIGHUP")
	}
	// The token takes effect before the reload logs that it is done.
	testenv.Eventually(t, "the reload logged", func() bool { return strings.Contains(d.Log(), "configuration reloaded on SIGHUP") })
	if strings.Contains(d.Log(), old) || strings.Contains(d.Log(), rotated) {
		t.Fatalf("reload log (no token may appear in it):\n%s", d.Log())
	}
}

func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.Env = append(append(os.Environ(), "XDG_STATE_HOME="+t.TempDir()), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// Every startup problem ends the daemon with one clear line.
func TestDaemonRefusesBadStartup(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	populated := t.TempDir()
	os.WriteFile(filepath.Join(populated, "notes.txt"), []byte("mine\n"), 0o644)
	busy, _ := net.Listen("tcp", "127.0.0.1:0")
	defer busy.Close()
	tests := []struct {
		why  string
		env  []string
		args []string
		want string
	}{
		{"config does not parse", nil, []string{"--config", write("bad.toml", "listen = ")}, "config "},
		{"unknown key", nil, []string{"--config", write("unknown.toml", "lisen = \"127.0.0.1:1\"\n")}, "unknown key lisen"},
		{"bad port range", nil, []string{"--port-range", "5000-4000"}, "port range"},
		{"bad env range", []string{"AGENT_CONTROL_PLANE_PORT_RANGE=abc"}, nil, "AGENT_CONTROL_PLANE_PORT_RANGE"},
		{"not loopback", nil, []string{"--listen", "0.0.0.0:4025"}, "not a loopback address"},
		{"bad native command", []string{`AGENT_CONTROL_PLANE_NATIVE_COMMAND=not json`}, nil, "JSON array"},
		{"port taken by another program", nil, []string{"--listen", busy.Addr().String()}, "in use by another program"},
		{"port taken by agent-control-plane", nil, []string{"--listen", d.Addr}, "another agent-control-plane"},
		{"root locked", nil, []string{"--root", d.Root}, "in use by another agent-control-plane"},
		{"root holds someone's files", nil, []string{"--root", populated}, "is not empty and has no .agent-control-plane-root mark"},
		{"token file others can read", []string{"AGENT_CONTROL_PLANE_TOKEN=", "AGENT_CONTROL_PLANE_TOKEN_FILE=" + write("token", testenv.NewToken())}, nil, "group and others must have no access"},
		{"token too short", []string{"AGENT_CONTROL_PLANE_TOKEN=short"}, nil, "AGENT_CONTROL_PLANE_TOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			args := append([]string{"serve", "--root", filepath.Join(dir, "root-"+strings.ReplaceAll(tc.why, " ", "-")),
				"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}, tc.args...)
			code, out := runBinary(t, tc.env, args...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant it to mention %q", code, out, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 && !strings.Contains(out, "Usage") {
				t.Fatalf("want one line, got %d:\n%s", lines, out)
			}
		})
	}
}

// The daemon forwards model-provider keys to standalone sandboxes from its
// environment and its env file, and no secret reaches its log, whatever the
// log format and level, nor any answer.
func TestSecretsAndForwardedKeys(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "agent.env")
	os.WriteFile(envFile, []byte("OPENAI_API_KEY=file-key-7f3a9c2e\n"), 0o600)
	config := filepath.Join(dir, "c.toml")
	os.WriteFile(config, []byte("[env]\nfile = \""+envFile+"\"\n"), 0o644)
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi,
		Env:  []string{"ANTHROPIC_API_KEY=env-key-4b1d8e6f", "AGENT_CONTROL_PLANE_LOG_LEVEL=debug"},
		Args: []string{"--config", config, "--log-format", "json"}})
	const secret = `req-secret-9a8b7c6d"\`
	body, _ := json.Marshal(map[string]any{"name": "sec", "labels": map[string]string{"origin": "cli"}, "envVars": map[string]string{
		"SERVICE_TOKEN": secret, "STUB_AGENT_PRINT": "printing " + secret + " env-key-4b1d8e6f file-key-7f3a9c2e",
	}})
	if code, b := call(t, d, "POST", "/v1/sandboxes", string(body)); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	waitState(t, d, "sec", "started")
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"harness","envVars":{"GAMMA_AGENT_TOKEN":"harness-token-5e5e"}}`); code != 201 {
		t.Fatalf("create harness: %d %s", code, b)
	}
	env := func(id string) map[string]string {
		b, _ := os.ReadFile(filepath.Join(d.Root, id, "runtime-env.json"))
		var m map[string]string
		json.Unmarshal(b, &m)
		return m
	}
	if e := env("sec"); e["ANTHROPIC_API_KEY"] != "env-key-4b1d8e6f" || e["OPENAI_API_KEY"] != "file-key-7f3a9c2e" {
		t.Fatalf("standalone sandbox did not get the forwarded keys")
	}
	if e := env("harness"); e["ANTHROPIC_API_KEY"] != "" || e["OPENAI_API_KEY"] != "" {
		t.Fatalf("harness sandbox got forwarded keys")
	}
	var answers []string
	testenv.Eventually(t, "stub output", func() bool {
		_, b := call(t, d, "GET", "/v1/sandboxes/sec/entrypoint-logs", "")
		answers = append(answers, string(b))
		return strings.Contains(string(b), "printing")
	})
	for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/sec", "/metrics", "/v1/info"} {
		_, b := call(t, d, "GET", path, "")
		answers = append(answers, string(b))
	}
	call(t, d, "POST", "/v1/sandboxes/sec/stop", "")
	call(t, d, "DELETE", "/v1/sandboxes/sec", "")
	for _, needle := range []string{"req-secret-9a8b7c6d", "env-key-4b1d8e6f", "file-key-7f3a9c2e", "harness-token-5e5e"} {
		for _, a := range answers {
			if strings.Contains(a, needle) {
				t.Fatalf("an answer leaks %q:\n%s", needle, a)
			}
		}
		if strings.Contains(d.Log(), needle) {
			t.Fatalf("the daemon log leaks %q:\n%s", needle, d.Log())
		}
	}
	if !strings.Contains(d.Log(), `"sandbox":"sec"`) {
		t.Fatalf("the JSON log does not name the sandbox:\n%s", d.Log())
	}
}

// A configuration file replaced by a FIFO does not wedge SIGHUP: the
// reload says the file is not a regular file and keeps what is in force,
// and the next reload (a token rotation here) still happens.
func TestFIFOConfigDoesNotWedgeSIGHUP(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("log_level = \"info\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, TokenFile: true, Env: []string{"AGENT_CONTROL_PLANE_CONFIG=" + cfg}})
	os.Remove(cfg)
	if err := syscall.Mkfifo(cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	testenv.Eventually(t, "the reload refused the FIFO", func() bool {
		return strings.Contains(d.Log(), "reload on SIGHUP failed") && strings.Contains(d.Log(), "not a regular file")
	})
	// Not wedged: the next SIGHUP is handled (with a loadable config
	// again, and a rotated token).
	os.Remove(cfg)
	os.WriteFile(cfg, []byte("log_level = \"info\"\n"), 0o600)
	rotated := testenv.NewToken()
	if err := os.WriteFile(filepath.Join(d.State, "agent-control-plane", "token"), []byte(rotated+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	testenv.Eventually(t, "the rotated token in force", func() bool {
		code, _ := call(t, d, "GET", "/v1/sandboxes", "")
		return code == 401
	})
}
