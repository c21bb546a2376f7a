package supervisor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// collect gathers an attachment's output until want is in it.
func collect(t *testing.T, got *strings.Builder, a *terminal.Attachment, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(got.String(), want) {
		select {
		case b, ok := <-a.Output():
			if !ok {
				t.Fatalf("the output ended without %q: %q", want, got.String())
			}
			got.Write(b)
		case <-deadline:
			t.Fatalf("no %q in the terminal's output: %q", want, got.String())
		}
	}
}

// A terminal runs the sandbox's shell on a real terminal of the size
// asked: typed into, resized, its exit code kept, its output kept for a
// client that attaches later, and a secret of the sandbox redacted.
func TestTerminal(t *testing.T) {
	h := realHarness(t, nil)
	h.create("t1", map[string]string{"API_TOKEN": "s3cr3t-value-for-the-test"}, nil)
	h.waitState("t1", Started)
	term, err := h.sup.OpenTerminal("t1", terminal.Spec{ID: "one", Cols: 100, Rows: 30, Env: map[string]string{"GREETING": "hello there"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, a, err := term.Attach()
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	if err := h.sup.TerminalInput("t1", "one", []byte("tty; stty size; echo \"$GREETING\"; echo $API_TOKEN\n")); err != nil {
		t.Fatal(err)
	}
	collect(t, &got, a, "30 100")
	collect(t, &got, a, "hello there")
	if !strings.Contains(got.String(), "/dev/pts/") {
		t.Errorf("tty in a terminal: %q", got.String())
	}
	if info, err := h.sup.ResizeTerminal("t1", "one", 120, 40); err != nil || info.Cols != 120 || info.Rows != 40 {
		t.Fatalf("resize: %+v, %v", info, err)
	}
	if _, err := h.sup.ResizeTerminal("t1", "one", 0, 40); !isErr(err, ErrInvalid) {
		t.Errorf("resize to 0 columns: %v", err)
	}
	_ = h.sup.TerminalInput("t1", "one", []byte("stty size\n"))
	collect(t, &got, a, "40 120")
	_ = h.sup.TerminalInput("t1", "one", []byte("exit 4\n"))
	select {
	case <-term.Ended():
	case <-time.After(30 * time.Second):
		t.Fatal("exit typed, the terminal runs on")
	}
	if e := term.Exit(); e.Code != 4 {
		t.Errorf("exit 4 typed: %+v", e)
	}
	// A client attaching later reads what was kept, redacted.
	kept, late, err := term.Attach()
	if err != nil {
		t.Fatal(err)
	}
	if _, open := <-late.Output(); open {
		t.Error("an attachment to an ended terminal is open")
	}
	if !strings.Contains(string(kept), "hello there") || strings.Contains(string(kept), "s3cr3t-value-for-the-test") {
		t.Errorf("the backlog: %q", kept)
	}
	if info := term.Info(); info.Active {
		t.Error("an ended terminal is active")
	}
}

// Terminals are bounded per sandbox; an ended one makes room, a name is
// one terminal's, and a stop leaves none behind.
func TestTerminalBounds(t *testing.T) {
	h := realHarness(t, nil)
	h.create("t2", nil, nil)
	h.waitState("t2", Started)
	for i := range MaxTerminalsPerSandbox {
		if _, err := h.sup.OpenTerminal("t2", terminal.Spec{ID: fmt.Sprint("t", i), Lazy: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.sup.OpenTerminal("t2", terminal.Spec{ID: "t0"}, nil); !isErr(err, ErrConflict) {
		t.Errorf("a name in use: %v", err)
	}
	if _, err := h.sup.OpenTerminal("t2", terminal.Spec{ID: "over"}, nil); !isErr(err, ErrBusy) {
		t.Fatalf("past the bound: %v", err)
	}
	if err := h.sup.TerminalInput("t2", "t1", []byte("x")); !isErr(err, ErrConflict) {
		t.Errorf("input for a lazy terminal nobody attached to: %v", err)
	}
	ended, _ := h.sup.Terminal("t2", "t3")
	ended.Close()
	if _, err := h.sup.OpenTerminal("t2", terminal.Spec{ID: "over"}, nil); err != nil {
		t.Fatalf("an ended terminal makes room: %v", err)
	}
	if _, err := h.sup.Terminal("t2", "t3"); !isErr(err, ErrNotFound) {
		t.Errorf("the ended terminal that made room: %v", err)
	}
	if _, err := h.sup.Stop(t.Context(), "t2", false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sup.Start(t.Context(), "t2"); err != nil {
		t.Fatal(err)
	}
	h.waitState("t2", Started)
	testenv.Eventually(t, "no terminal after a restart", func() bool {
		list, err := h.sup.Terminals("t2")
		return err == nil && len(list) == 0
	})
	h.sup.terms.mu.Lock()
	n := h.sup.terms.count
	h.sup.terms.mu.Unlock()
	if n != 0 {
		t.Errorf("%d terminals counted after a restart", n)
	}
}
