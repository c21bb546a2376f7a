package terminal

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// chatty is a command that prints n pieces and ends.
type chatty struct {
	done chan struct{}
}

func (c *chatty) Wait(ctx context.Context) (runtime.Exit, error) {
	select {
	case <-c.done:
		return runtime.Exit{Code: 0}, nil
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
}
func (c *chatty) Kill() error           { return nil }
func (c *chatty) Resize(int, int) error { return nil }

// A client that does not read is let go once it falls queued pieces
// behind, and the backlog kept for later clients stays within Backlog,
// the latest output in it; the command runs on, never held up.
func TestSlowClientLetGoBacklogBounded(t *testing.T) {
	const pieces = 4 * queued
	piece := strings.Repeat("x", 1000) + "\n"
	started := make(chan io.Writer, 1)
	cmd := &chatty{done: make(chan struct{})}
	term, err := New(Spec{ID: "t", Lazy: true}, func(_ io.Reader, out io.Writer, _, _ int) (runtime.Terminal, error) {
		started <- out
		return cmd, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, slow, err := term.Attach() // never reads
	if err != nil {
		t.Fatal(err)
	}
	out := <-started
	for i := range pieces {
		if _, err := io.WriteString(out, piece); err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
	}
	io.WriteString(out, "the end\n")
	close(cmd.done)
	select {
	case <-term.Ended():
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal did not end")
	}
	if !slow.Lagged() {
		t.Error("a client that never read was not let go")
	}
	kept, _, err := term.Attach()
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) > Backlog || !strings.HasSuffix(string(kept), "the end\n") {
		t.Errorf("the backlog: %d bytes (at most %d), ends %q", len(kept), Backlog, kept[max(0, len(kept)-20):])
	}
}
