package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// follower runs FollowLogs in the background and collects what it emits.
type follower struct {
	mu     sync.Mutex
	out    map[string]*strings.Builder
	chunks int
	done   chan struct{}
	final  Sandbox
	err    error
}

func follow(t *testing.T, s *Supervisor, id string, tail int) *follower {
	f := &follower{out: map[string]*strings.Builder{"stdout": {}, "stderr": {}}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); <-f.done })
	go func() {
		defer close(f.done)
		f.final, f.err = s.FollowLogs(ctx, id, LogQuery{TailBytes: tail}, func(c LogChunk) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(c.Text) > FollowChunk {
				return fmt.Errorf("a chunk of %d bytes", len(c.Text))
			}
			f.out[c.Stream].WriteString(c.Text)
			f.chunks++
			return nil
		})
	}()
	return f
}

func (f *follower) text(stream string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out[stream].String()
}

func (f *follower) waitFor(t *testing.T, stream, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(f.text(stream), want) {
		if time.Now().After(deadline) {
			s := f.text(stream)
			t.Fatalf("%s never showed %q: %d bytes, ending %q", stream, want, len(s), s[max(0, len(s)-200):])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appendLog writes to a sandbox's log as its child does (O_APPEND).
func appendLog(t *testing.T, dir, name, text string) {
	t.Helper()
	fd, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// Following a log shows its tail, then whole lines as they are written,
// redacted, across rotations of every kind, and ends when the sandbox
// stops.
func TestFollowLogs(t *testing.T) {
	for _, c := range []struct {
		name string
		how  int
	}{{"collapse", logcap.CutCollapse}, {"punch", logcap.CutPunch}, {"truncate", logcap.CutTruncate}} {
		t.Run(c.name, func(t *testing.T) {
			defer logcap.LimitCut(c.how)()
			h := newHarness(t, func(o *Options) { o.LogMaxBytes = 64 << 10 })
			h.create("f1", map[string]string{"STUB_AGENT_PRINT": "hello-at-start", "API_TOKEN": "s3cret-value-42"}, nil)
			h.waitState("f1", Started)
			dir := filepath.Join(h.opts.Root, "f1")
			f := follow(t, h.sup, "f1", 0)
			f.waitFor(t, "stdout", "hello-at-start")

			appendLog(t, dir, logcap.Stdout, "part")
			appendLog(t, dir, logcap.Stdout, "ial line with s3cret-value-42\n")
			f.waitFor(t, "stdout", "partial line with ")
			appendLog(t, dir, logcap.Stderr, "to stderr\n")
			f.waitFor(t, "stderr", "to stderr\n")

			// 200 KB in batches, each read before the next is written:
			// the log rotates several times under the follower.
			line := strings.Repeat("x", 990)
			for batch := 0; batch < 25; batch++ {
				var b strings.Builder
				for i := 0; i < 8; i++ {
					fmt.Fprintf(&b, "n%04d %s\n", batch*8+i, line)
				}
				appendLog(t, dir, logcap.Stdout, b.String())
				f.waitFor(t, "stdout", fmt.Sprintf("n%04d ", batch*8+7))
			}
			if _, err := os.Stat(filepath.Join(dir, logcap.Stdout+logcap.RotatedSuffix)); err != nil {
				t.Fatalf("the log never rotated: %v", err)
			}
			text := f.text("stdout")
			if strings.Contains(text, "s3cret-value-42") {
				t.Error("a followed line shows a secret")
			}
			if strings.Contains(text, "rotated away") {
				t.Error("a follower that kept up was told output was rotated away")
			}
			// Every line once, in order, whole.
			lines := strings.Split(text, "\n")
			next := 0
			for _, l := range lines {
				if !strings.HasPrefix(l, "n") || len(l) != 996 {
					continue
				}
				if want := fmt.Sprintf("n%04d %s", next, line); l != want {
					t.Fatalf("line %d: got %.20q…", next, l)
				}
				next++
			}
			if next != 200 {
				t.Fatalf("%d of 200 lines followed", next)
			}

			// A stop ends the following, after the last output.
			appendLog(t, dir, logcap.Stdout, "last words\n")
			if _, err := h.sup.Stop(context.Background(), "f1", false); err != nil {
				t.Fatal(err)
			}
			select {
			case <-f.done:
			case <-time.After(time.Minute):
				t.Fatal("following did not end at the stop")
			}
			if f.err != nil || f.final.State != Stopped || !strings.Contains(f.text("stdout"), "last words\n") {
				t.Fatalf("ended with %v, state %s", f.err, f.final.State)
			}
		})
	}
}

// A stopped sandbox's tail is all there is; a missing one is not found.
func TestFollowLogsStopped(t *testing.T) {
	h := newHarness(t, nil)
	h.create("s", map[string]string{"STUB_AGENT_PRINT": "said once"}, nil)
	h.waitState("s", Started)
	if _, err := h.sup.Stop(context.Background(), "s", false); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	sb, err := h.sup.FollowLogs(context.Background(), "s", LogQuery{}, func(c LogChunk) error { got.WriteString(c.Text); return nil })
	if err != nil || sb.State != Stopped || !strings.Contains(got.String(), "said once") {
		t.Fatalf("%v %s %q", err, sb.State, got.String())
	}
	if _, err := h.sup.FollowLogs(context.Background(), "nope", LogQuery{}, func(LogChunk) error { return nil }); !isErr(err, ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
}

// One line written to a followed log until the follower has it: the
// inotify event, the cap's look at the log, the wake, the read, the
// redaction and the emit (acp-bench measures HTTP and SSE on top).
func BenchmarkFollowLine(b *testing.B) {
	w, err := proc.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	root := b.TempDir()
	s, err := New(context.Background(), Options{Root: root, PortLo: 20000, PortHi: 20009, StartupTimeout: time.Hour,
		Runtimes: registry(&native.Runtime{Watcher: w, Argv: []string{"sleep", "3600"}}),
		Env:      childenv.Policy{Base: map[string]string{"PATH": "/usr/bin:/bin"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { s.opts.StopOnClose = true; s.Close(context.Background()) }()
	if _, err := s.Create(context.Background(), CreateRequest{Name: "f"}); err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.FollowLogs(ctx, "f", LogQuery{}, func(c LogChunk) error {
		got <- struct{}{}
		return nil
	})
	fd, err := os.OpenFile(filepath.Join(root, "f", logcap.Stdout), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer fd.Close()
	fd.WriteString("warm-up\n")
	<-got
	b.ResetTimer()
	for b.Loop() {
		fd.WriteString("a line of output\n")
		<-got
	}
}

// A follower that starts after a rotation gets its tail across the
// rotated file, as the entrypoint-logs tail does.
func TestFollowLogsTailAcrossRotation(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.LogMaxBytes = 64 << 10 })
	h.create("r", nil, nil)
	h.waitState("r", Started)
	dir := filepath.Join(h.opts.Root, "r")
	var b strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "line %02d %s\n", i, strings.Repeat("y", 990))
	}
	appendLog(t, dir, logcap.Stdout, b.String()) // 40 KB: over half the cap, rotated
	testenv.Eventually(t, "the log rotated", func() bool {
		_, err := os.Stat(filepath.Join(dir, logcap.Stdout+logcap.RotatedSuffix))
		return err == nil
	})
	f := follow(t, h.sup, "r", 20000)
	f.waitFor(t, "stdout", "line 39 ")
	text := f.text("stdout")
	if !strings.HasPrefix(text, "line ") || !strings.Contains(text, "line 25 ") {
		t.Fatalf("the tail of a rotated log starts %.30q and holds %d bytes", text, len(text))
	}
}

// A secret in a line longer than a chunk is redacted even where the chunks
// of that line are cut: lines are redacted whole, then cut.
func TestFollowLogsRedactsAcrossChunks(t *testing.T) {
	h := newHarness(t, nil)
	const secret = "s3cret-value-across-the-cut-0123456789"
	h.create("long", map[string]string{"API_TOKEN": secret}, nil)
	h.waitState("long", Started)
	f := follow(t, h.sup, "long", 0)
	line := strings.Repeat("a", FollowChunk-len(secret)/2) + secret + strings.Repeat("b", 500) + "\n"
	appendLog(t, filepath.Join(h.opts.Root, "long"), logcap.Stdout, line)
	f.waitFor(t, "stdout", strings.Repeat("b", 500)+"\n")
	if text := f.text("stdout"); strings.Contains(text, secret[:len(secret)/2]) || strings.Contains(text, secret[len(secret)/2:]) {
		t.Fatal("a secret cut by a chunk boundary was not redacted")
	}
	if f.chunks < 2 {
		t.Fatalf("the %d-byte line came in %d chunk(s)", len(line), f.chunks)
	}
}
