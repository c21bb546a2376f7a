package tests

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
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
	if code, out, _ := cli(t, d, "exec", "--json", "in", "sh", "-c", "echo j; exit 3"); code != 3 || !strings.Contains(out, `"exitCode": 3`) || !strings.Contains(out, `"stdout": "j\n"`) {
		t.Fatalf("exec --json: %d %q", code, out)
	}
	// As docker exec: everything after the name is the command, its
	// flags too, with no "--".
	if code, out, errs := cli(t, d, "exec", "in", "ls", "-la"); code != 0 || !strings.Contains(out, " ..\n") {
		t.Fatalf("exec in ls -la: %d %q %q", code, out, errs)
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

// exec -it runs the command on a terminal of the outer terminal's size:
// what is typed reaches it, a resize of the outer terminal follows, its
// exit code is exec's, and the outer terminal is as it was after.
func TestCLIExecTerminal(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "tt", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	cmd := cliCmd(t, d, "exec", "-it", "tt", "sh")
	outer, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	defer tty.Close()
	pty.Setsize(outer, &pty.Winsize{Rows: 33, Cols: 101})
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen strings.Builder
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := outer.Read(b)
			mu.Lock()
			seen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	await := func(want string) {
		t.Helper()
		testenv.Eventually(t, "the terminal shows "+want, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(seen.String(), want)
		})
	}
	outer.Write([]byte("tty; stty size\r"))
	await("/dev/pts/")
	await("33 101")
	pty.Setsize(outer, &pty.Winsize{Rows: 40, Cols: 120})
	testenv.Eventually(t, "the inner terminal follows the outer's size", func() bool {
		outer.Write([]byte("stty size\r")) // again at each poll: the resize reaches the sandbox a moment after
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(seen.String(), "40 120")
	})
	outer.Write([]byte("exit 7\r"))
	if code := waitExit(t, cmd); code != 7 {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("exec -it of exit 7: %d; the terminal showed %q", code, seen.String())
	}
	if st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || st.Lflag&(unix.ICANON|unix.ECHO) != unix.ICANON|unix.ECHO {
		t.Errorf("the outer terminal after exec -it: %+v, %v (not back in cooked mode)", st, err)
	}
	// A command without a terminal to attach to is refused, saying why.
	if code, _, errs := cli(t, d, "exec", "-t", "tt", "true"); code == 0 || !strings.Contains(errs, "needs a terminal") {
		t.Fatalf("exec -t without a terminal: %d %q", code, errs)
	}
}

// shell passes the shell's own end on: exit 5 typed is shell's exit 5.
func TestCLIShellExitStatus(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "sx", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	cmd := cliCmd(t, d, "shell", "sx")
	cmd.Stdin = strings.NewReader("echo before\nexit 5\necho never\n")
	if code, out, errs := runCmd(t, cmd); code != 5 || out != "before\n" || strings.Contains(errs, "not_found") {
		t.Fatalf("shell with exit 5: %d %q %q", code, out, errs)
	}
}

// exec streams: what the command writes arrives while it runs, each
// stream to its own, and its exit code is exec's at the end.
func TestCLIExecStreams(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "st", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	// The command waits for a file the test makes once it has seen the
	// first line: that line came while the command ran.
	cmd := cliCmd(t, d, "exec", "st", "sh", "-c", "echo first; echo early >&2; while [ ! -e go ]; do sleep 0.05; done; echo last; exit 4")
	stdout, _ := cmd.StdoutPipe()
	var errs lockedBuilder
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	first := make([]byte, len("first\n"))
	if _, err := io.ReadFull(stdout, first); err != nil || string(first) != "first\n" {
		t.Fatalf("the first line while the command waits: %q %v", first, err)
	}
	testenv.Eventually(t, "stderr while the command waits", func() bool { return strings.Contains(errs.String(), "early") })
	os.WriteFile(filepath.Join(d.Root, "st", supervisor.WorkspaceDir, "go"), nil, 0o644)
	rest, _ := io.ReadAll(stdout)
	if code := waitExit(t, cmd); code != 4 || string(rest) != "last\n" {
		t.Fatalf("the end: %d %q", code, rest)
	}
}

// lockedBuilder is a strings.Builder written by one goroutine and read by
// another.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
