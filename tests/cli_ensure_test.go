package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// ensure starts a daemon when none runs, finds a running one, and refuses
// a port held by something else.
func TestEnsure(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	lo, hi := portBlock.Next()
	url := fmt.Sprintf("http://127.0.0.1:%d", lo) // the block's first port for the API
	lo++
	ensure := func() (int, string, string) {
		cmd := cliAtCmd(t, url, "ensure")
		cmd.Env = append(cmd.Env, "AGENT_CONTROL_PLANE_ROOT="+root, "XDG_STATE_HOME="+state,
			fmt.Sprintf("AGENT_CONTROL_PLANE_PORT_RANGE=%d-%d", lo, hi))
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, out.String(), errb.String()
	}
	code, out, errs := ensure()
	if code != 0 || out != url+"\n" || !strings.Contains(errs, "Started agent-control-plane") {
		t.Fatalf("first ensure: %d %q %q", code, out, errs)
	}
	d := &testenv.Daemon{URL: url}
	info, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	pid := int(info["pid"].(float64))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL); testenv.KillSandboxes(root) })
	if info["root"] != root {
		t.Fatalf("daemon root %v", info["root"])
	}
	code, out, errs = ensure()
	if code != 0 || out != url+"\n" || errs != "" {
		t.Fatalf("second ensure: %d %q %q", code, out, errs)
	}
	if again, _ := d.Info(); int(again["pid"].(float64)) != pid {
		t.Fatal("second ensure started another daemon")
	}
	// ensure's daemon made the token file; the CLI finds it with no flag,
	// and refuses a wrong one with a hint.
	ls := cliAtCmd(t, url, "ls")
	ls.Env = append(ls.Env, "XDG_STATE_HOME="+state)
	if code, out, errs := runCmd(t, ls); code != 0 || !strings.Contains(out, "No sandboxes") {
		t.Fatalf("ls with the token file and no flag: %d %q %q", code, out, errs)
	}
	if code, _, errs := cliAt(t, url, "ls", "--token", "wrong-token-0123456789"); code != 1 || !strings.Contains(errs, "unauthorized") {
		t.Fatalf("ls with a wrong --token: %d %q", code, errs)
	}
	// The daemon started by ensure outlives it and logs to the state dir.
	if _, err := os.Stat(filepath.Join(state, "agent-control-plane", "daemon.log")); err != nil {
		t.Fatal(err)
	}

	// Something else on the port.
	foreign := httptest.NewServer(http.NotFoundHandler())
	defer foreign.Close()
	url = foreign.URL
	code, _, errs = ensure()
	if code == 0 || !strings.Contains(errs, "something else") {
		t.Fatalf("foreign HTTP server: %d %q", code, errs)
	}
	// A listener that accepts and never answers.
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	url = "http://" + silent.Addr().String()
	code, _, errs = ensure()
	if code == 0 || !strings.Contains(errs, "in use by another program") {
		t.Fatalf("silent listener: %d %q", code, errs)
	}
}

// create --wait waits for the daemon's word, whatever its ready path: a
// real program that answers "/" and not /api/info is ready as soon as the
// daemon says so.
func TestCreateWaitUsesTheDaemonsReadyPath(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the test runs a real HTTP server with it")
	}
	// python3 by name: the sandbox finds it in its PATH as it sees it.
	d := configDaemon(t, `
[native]
command = ["sh", "-c", "exec python3 -m http.server \"$PORT\" --bind 127.0.0.1"]
ready_path = "/"
`)
	code, out, errOut := cli(t, d, "create", "--wait", "--timeout", "60s", "py")
	if code != 0 {
		t.Fatalf("create --wait: %d %s %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "probes / on port") {
		t.Errorf("create --wait does not say what it waits for: %q", errOut)
	}
	if info := get(t, d, "py"); info.State != "started" {
		t.Errorf("after create --wait the sandbox is %s", info.State)
	}
}

// A program that never answers the ready path: create --wait gives up at
// its timeout and says why.
func TestCreateWaitTimesOut(t *testing.T) {
	d := configDaemon(t, `
[native]
ready_path = "/never-answers"
`)
	code, _, errOut := cli(t, d, "create", "--wait", "--timeout", "2s", "slow")
	if code == 0 || !strings.Contains(errOut, "did not start within 2s") || !strings.Contains(errOut, "/never-answers") {
		t.Fatalf("create --wait on a sandbox that never gets ready: %d %s", code, errOut)
	}
}
