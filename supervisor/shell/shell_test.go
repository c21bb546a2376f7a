package shell

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// localShell runs the session's shell as a plain child of the test.
func localShell(t *testing.T) *Session {
	t.Helper()
	return localShellIn(t, nil)
}

// localShellIn is localShell with its output counted in budget.
func localShellIn(t *testing.T, budget *Budget) *Session {
	t.Helper()
	s, err := New("s1", func(stdin io.Reader, stdout, stderr io.Writer) (runtime.Process, error) {
		cmd := exec.Command("sh")
		cmd.Stdout, cmd.Stderr = stdout, stderr
		in, err := cmd.StdinPipe() // as the runtimes do: Wait does not wait on the copy
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() { io.Copy(in, stdin); in.Close() }()
		return &cmdProcess{cmd}, nil
	}, budget)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

type cmdProcess struct{ cmd *exec.Cmd }

func (p *cmdProcess) Wait(context.Context) (runtime.Exit, error) {
	p.cmd.Wait() // a non-zero exit is an exit code, not an error here
	return runtime.Exit{Code: p.cmd.ProcessState.ExitCode()}, nil
}
func (p *cmdProcess) Kill() error { return p.cmd.Process.Kill() }

func run(t *testing.T, s *Session, line string) *Command {
	t.Helper()
	c, err := s.Run(line)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Fatalf("%q did not end", line)
	}
	return c
}

func TestStatePersistsBetweenCommands(t *testing.T) {
	s := localShell(t)
	if c := run(t, s, "cd /tmp && export X=1"); *c.ExitCode() != 0 {
		t.Fatalf("exit %d", *c.ExitCode())
	}
	c := run(t, s, "pwd; echo $X")
	if out, _, _, _ := c.Logs(); out != "/tmp\n1\n" {
		t.Fatalf("pwd; echo $X: %q", out)
	}
}

func TestOutputsAndCodesAreEachCommands(t *testing.T) {
	s := localShell(t)
	c := run(t, s, "printf out; printf err >&2; exit_code() { return 7; }; exit_code")
	out, errs, both, cut := c.Logs()
	if out != "out" || errs != "err" || len(both) != 6 || cut || *c.ExitCode() != 7 {
		t.Fatalf("out %q err %q both %q cut %v code %d", out, errs, both, cut, *c.ExitCode())
	}
	// A line the shell cannot parse is that command's error, and the
	// session goes on.
	c = run(t, s, `echo "unterminated`)
	if *c.ExitCode() == 0 {
		t.Fatal("a syntax error exited 0")
	}
	c = run(t, s, "echo 'it''s' \"fine\"")
	if out, _, _, _ := c.Logs(); out != "its fine\n" {
		t.Fatalf("after the error: %q", out)
	}
	// A marker a command prints is not one: the daemon's carries a secret.
	c = run(t, s, `printf '\n__acp_fake_0\nafter\n'`)
	if out, _, _, _ := c.Logs(); !strings.Contains(out, "after") {
		t.Fatalf("a forged marker cut the output: %q", out)
	}
}

func TestInputReachesTheRunningCommand(t *testing.T) {
	s := localShell(t)
	c, err := s.Run("read line; echo got $line")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.Input(c.ID, "hello\n") != nil { // until it has started
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-c.Done()
	if out, _, _, _ := c.Logs(); out != "got hello\n" {
		t.Fatalf("%q", out)
	}
	if err := s.Input(c.ID, "x"); err != ErrFinished {
		t.Fatalf("input to a finished command: %v", err)
	}
}

// Input sent the moment a command counts as running reaches that
// command, not the shell before the command's line: a command that
// reads its input then waited forever (the shell had read the input as
// a command of its own). Many rounds, input sent without a pause.
func TestInputNeverOvertakesItsCommand(t *testing.T) {
	s := localShell(t)
	for i := range 100 {
		c, err := s.Run("read line; echo got $line")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for err := s.Input(c.ID, "hello\n"); err != nil; err = s.Input(c.ID, "hello\n") {
			switch {
			case err == ErrFinished:
				t.Fatalf("round %d: finished before its input", i)
			case time.Now().After(deadline):
				t.Fatalf("round %d: the command never started", i)
			}
			goruntime.Gosched() // no pause: the input goes the moment it may
		}
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the command never got its input", i)
		}
		if out, _, _, _ := c.Logs(); out != "got hello\n" {
			t.Fatalf("round %d: %q", i, out)
		}
	}
}

func TestFollowToTheEnd(t *testing.T) {
	s := localShell(t)
	c, _ := s.Run("for i in 1 2 3; do echo $i; sleep 0.05; done; echo bye >&2")
	var got strings.Builder
	if err := c.Follow(context.Background(), func(stderr bool, text string) error {
		if stderr {
			text = "E:" + text
		}
		got.WriteString(text)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got.String() != "1\n2\n3\nE:bye\n" {
		t.Fatalf("followed %q", got.String())
	}
}

func TestTheShellEnding(t *testing.T) {
	s := localShell(t)
	c := run(t, s, "exit 4")
	if *c.ExitCode() != 4 {
		t.Fatalf("exit 4: %d", *c.ExitCode())
	}
	<-s.Ended()
	if _, err := s.Run("true"); err != ErrClosed {
		t.Fatalf("run after the end: %v", err)
	}
}

func TestBounds(t *testing.T) {
	s := localShell(t)
	c := run(t, s, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end")
	out, _, _, cut := c.Logs()
	if !cut || len(out) > MaxOutput || !strings.HasSuffix(out, "\nend\n") {
		t.Fatalf("output %d bytes, cut %v, ends %q", len(out), cut, out[max(0, len(out)-10):])
	}
	if _, err := s.Run(strings.Repeat("x", MaxLine+1)); err == nil {
		t.Fatal("an oversize line was taken")
	}
	blocker, _ := s.Run("sleep 60")
	var err error
	for i := 0; i <= MaxQueued && err == nil; i++ {
		_, err = s.Run("true")
	}
	if err != ErrBusy {
		t.Fatalf("the queue has no bound: %v", err)
	}
	_ = blocker
}

// Input a command never reads is dropped when it ends, never run by the
// shell as a command of its own.
func TestUnreadInputIsNeverRun(t *testing.T) {
	s := localShell(t)
	stop := filepath.Join(t.TempDir(), "stop")
	c, err := s.Run("until [ -e " + stop + " ]; do sleep 0.05; done") // reads nothing
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.Input(c.ID, "echo pwned; exit 9\necho pwned again") != nil {
		if time.Now().After(deadline) || c.Finished() {
			t.Fatal("the input was never taken")
		}
		time.Sleep(5 * time.Millisecond)
	}
	os.WriteFile(stop, nil, 0o644)
	<-c.Done()
	next := run(t, s, "echo next")
	if out, _, _, _ := next.Logs(); out != "next\n" || *next.ExitCode() != 0 {
		t.Fatalf("the next command: %q %d", out, *next.ExitCode())
	}
	for _, c := range s.Commands() {
		if out, _, _, _ := c.Logs(); strings.Contains(out, "pwned") {
			t.Fatalf("%s ran the input: %q", c.ID, out)
		}
	}
}

// Input to a command that never reads never waits: past the bound it is
// refused at once, and the session goes on once the command ends.
func TestInputToACommandThatNeverReads(t *testing.T) {
	s := localShell(t)
	stop := filepath.Join(t.TempDir(), "stop")
	c, _ := s.Run("until [ -e " + stop + " ]; do sleep 0.05; done") // ends when the test says, reading nothing
	chunk := strings.Repeat("x", 64<<10)
	deadline := time.Now().Add(time.Minute)
	sent := 0
	for {
		err := s.Input(c.ID, chunk)
		switch {
		case err == ErrInputFull:
		case err == nil:
			sent += len(chunk)
			if sent > 4*MaxPendingInput {
				t.Fatalf("%d bytes taken for a command that reads none", sent)
			}
			continue
		case err == ErrFinished, time.Now().After(deadline):
			t.Fatalf("input: %v", err)
		default:
			continue // not started yet
		}
		break
	}
	os.WriteFile(stop, nil, 0o644)
	<-c.Done()
	if out, _, _, _ := run(t, s, "echo after").Logs(); out != "after\n" {
		t.Fatalf("after: %q", out)
	}
}

// Sessions together keep at most their budget of finished commands'
// output: the oldest goes first, and its logs say they were cut.
func TestBudgetDropsTheOldest(t *testing.T) {
	b := NewBudget(3 << 20)
	s1, s2 := localShellIn(t, b), localShellIn(t, b)
	first := run(t, s1, "head -c 900000 /dev/zero | tr '\\0' a")
	for range 3 {
		run(t, s2, "head -c 900000 /dev/zero | tr '\\0' b")
	}
	if used := b.Used(); used > 3<<20 {
		t.Fatalf("the sessions hold %d bytes, budget %d", used, 3<<20)
	}
	if out, _, _, cut := first.Logs(); out != "" || !cut {
		t.Fatalf("the oldest output was kept: %d bytes, cut %v", len(out), cut)
	}
	last := s2.Commands()[2]
	if out, _, _, cut := last.Logs(); len(out) != 900000 || cut {
		t.Fatalf("the newest output: %d bytes, cut %v", len(out), cut)
	}
	s1.Close()
	s2.Close()
	if used := b.Used(); used != 0 {
		t.Fatalf("ended sessions still count %d bytes", used)
	}
}
