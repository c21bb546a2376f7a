package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// exec passes its input through, keeps stdout and stderr apart and exits
// with the command's code; cp copies both ways; get shows the workspace.
func TestCLIInsideASandbox(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "in", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	cmd := cliCmd(t, d, "exec", "in", "--", "sh", "-c", "tr a-z A-Z; echo to-stderr >&2; exit 7")
	cmd.Stdin = strings.NewReader("piped in\n")
	code, out, errs := runCmd(t, cmd)
	if code != 7 || out != "PIPED IN\n" || errs != "to-stderr\n" {
		t.Fatalf("exec: %d %q %q", code, out, errs)
	}
	if code, _, errs := cli(t, d, "exec", "in", "--", "no-such-program-x"); code != 127 || !strings.Contains(errs, "no-such-program-x") {
		t.Fatalf("exec of a missing program: %d %q", code, errs)
	}
	if code, out, _ := cli(t, d, "exec", "--env", "GREETING=hey", "in", "--", "sh", "-c", "echo $GREETING; pwd"); code != 0 || !strings.Contains(out, "hey\n") {
		t.Fatalf("exec --env: %d %q", code, out)
	}

	local := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(local, []byte("round trip\n"), 0o640)
	if code, _, errs := cli(t, d, "cp", local, "in:sub-notes.txt"); code != 0 {
		t.Fatalf("cp in: %d %s", code, errs)
	}
	ws := filepath.Join(d.Root, "in", supervisor.WorkspaceDir)
	if b, err := os.ReadFile(filepath.Join(ws, "sub-notes.txt")); err != nil || string(b) != "round trip\n" {
		t.Fatalf("copied in: %q %v", b, err)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	if code, _, errs := cli(t, d, "cp", "in:sub-notes.txt", back); code != 0 {
		t.Fatalf("cp out: %d %s", code, errs)
	}
	if b, _ := os.ReadFile(back); string(b) != "round trip\n" {
		t.Fatalf("copied out: %q", b)
	}
	if code, _, errs := cli(t, d, "cp", "in:../../etc/passwd", back); code != 1 || !strings.Contains(errs, "path_outside") {
		t.Fatalf("cp of an escape: %d %q", code, errs)
	}
	// shell: a session, its state kept from line to line.
	cmd = cliCmd(t, d, "shell", "in")
	cmd.Stdin = strings.NewReader("cd /tmp && export Y=2\npwd; echo $Y\nfalse\n")
	if code, out, errs := runCmd(t, cmd); code != 1 || out != "/tmp\n2\n" {
		t.Fatalf("shell: %d %q %q", code, out, errs)
	}
	if code, out, _ := cli(t, d, "get", "in"); code != 0 || !strings.Contains(out, "Workspace:") || !strings.Contains(out, ws) {
		t.Fatalf("get: %d %s", code, out)
	}
}
