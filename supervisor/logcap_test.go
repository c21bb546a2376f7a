package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// fileBytes is what a file holds on disk (its blocks); 0 if it is not there.
func fileBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// dirBytes sums the disk space the regular files under dir use (a
// punched-out head uses none).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n += fileBytes(path)
		}
		return nil
	})
	return n
}

// A child that writes 200 MB (100 MB to each stream) keeps its sandbox
// directory under the cap, and the newest lines are in entrypoint-logs;
// with each way of cutting a log's head. Truncation, the last resort, may
// lose the bytes of its last instant, so only there the very last line is
// not required.
func TestLogCap(t *testing.T) {
	const capBytes = 1 << 20
	for _, c := range []struct {
		name     string
		how      int
		lossless bool
	}{{"collapse", logcap.CutCollapse, true}, {"punch", logcap.CutPunch, true}, {"truncate", logcap.CutTruncate, false}} {
		t.Run(c.name, func(t *testing.T) {
			defer logcap.LimitCut(c.how)()
			h := realHarness(t, func(o *Options) { o.LogMaxBytes = capBytes })
			h.create("chatty", map[string]string{"STUB_AGENT_SPAM_BYTES": "100000000"}, nil)
			h.waitState("chatty", Started)
			dir := filepath.Join(h.opts.Root, "chatty")
			testenv.Eventually(t, "the sandbox directory under the cap", func() bool {
				if n := dirBytes(dir); n > 2*capBytes+2*capBytes/32+64<<10 { // the logs, their indexes, one block each
					sizes := map[string]int64{}
					ents, _ := os.ReadDir(dir)
					for _, e := range ents {
						if fi, err := e.Info(); err == nil {
							sizes[e.Name()] = fi.Size()
						}
					}
					t.Logf("%d bytes: %v", n, sizes)
					return false
				}
				return true
			})
			logs, err := h.sup.EntrypointLogs(context.Background(), "chatty", LogQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{logs.Stdout, logs.Stderr} {
				if c.lossless && !strings.Contains(s, "stub-agent: last spam line") || !strings.Contains(s, "spam line 00") || strings.Contains(s, "\x00") {
					t.Fatalf("newest lines missing from the tail:\n%.300s…", s[max(0, len(s)-300):])
				}
			}
			if _, err := os.Stat(filepath.Join(dir, logcap.Stdout+logcap.RotatedSuffix)); err != nil {
				t.Fatalf("no rotated file: %v", err)
			}
			t.Logf("%s: %d bytes on disk after 200 MB written", c.name, dirBytes(dir))
		})
	}
}

// The tail reads across the rotation: the live file alone is shorter than
// the tail asked for, so the rest comes from the rotated file, every line
// once and in order, each dated.
func TestLogTailAcrossRotation(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.LogMaxBytes = 64 << 10 })
	h.create("t", nil, nil)
	h.waitState("t", Started)
	dir := filepath.Join(h.opts.Root, "t")
	f, err := os.OpenFile(filepath.Join(dir, logcap.Stdout), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 4000 // "line 0000\n": 40 000 bytes, past half the cap
	for i := 0; i < n; i += 100 {
		var b strings.Builder
		for j := i; j < i+100; j++ {
			fmt.Fprintf(&b, "line %04d\n", j)
		}
		f.WriteString(b.String())
	}
	// Rotated: the older part is in the rotated file, and then (a moment
	// later) cut from the live one.
	var live []byte
	testenv.Eventually(t, "the log rotated", func() bool {
		_, err := os.Stat(filepath.Join(dir, logcap.Stdout+logcap.RotatedSuffix))
		live, _ = os.ReadFile(filepath.Join(dir, logcap.Stdout))
		return err == nil && len(bytes.TrimLeft(live, "\x00")) < n*len("line 0000\n")
	})
	logs, err := h.sup.EntrypointLogs(context.Background(), "t", LogQuery{TailBytes: 38000, Stream: StreamStdout})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs.Stdout) <= len(bytes.TrimLeft(live, "\x00")) {
		t.Fatalf("the tail (%d bytes) did not reach into the rotated file (the live one holds %d)", len(logs.Stdout), len(live))
	}
	first := n - len(logs.Lines)
	for i, l := range logs.Lines {
		if want := fmt.Sprintf("line %04d\n", first+i); l.Text != want || l.At.IsZero() || l.Stream != StreamStdout {
			t.Fatalf("line %d is %+v, want %q dated", i, l, want)
		}
		if i > 0 && l.At.Before(logs.Lines[i-1].At) {
			t.Fatalf("line %d dated before the one before it", i)
		}
	}
}

// On a full disk the older part cannot be kept: that is logged, the cap
// still holds, and the sandbox and the daemon go on. (tmpfs: no collapse,
// so this also runs the truncating path on a file system that refuses it.)
func TestLogCapFullDisk(t *testing.T) {
	root := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("needs to mount a small tmpfs (root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })
	defer logcap.LimitCut(logcap.CutCollapse)() // whatever the tmpfs made it fall to
	var logBuf syncBuffer
	h := realHarness(t, func(o *Options) {
		o.Root = root
		o.LogMaxBytes = 4 << 20
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	h.create("filler", map[string]string{"STUB_AGENT_SPAM_BYTES": "20000000"}, nil)
	h.waitState("filler", Started)
	testenv.Eventually(t, "a rotation failure logged", func() bool { return strings.Contains(logBuf.String(), "could not be kept") })
	if sb, err := h.sup.Get("filler"); err != nil || sb.State != Started {
		t.Fatalf("sandbox after a full disk: %+v %v", sb, err)
	}
	// The cap is each stream's (live and rotated file together). Whether
	// a stream's older part was kept before the disk filled depends on
	// timing, so the directory as a whole may hold up to both streams'.
	dir := filepath.Join(root, "filler")
	stream := func(name string) int64 {
		return fileBytes(filepath.Join(dir, name)) + fileBytes(filepath.Join(dir, name+logcap.RotatedSuffix))
	}
	defer func() {
		if t.Failed() {
			t.Logf("stdout %d bytes, stderr %d (cap %d each)", stream(logcap.Stdout), stream(logcap.Stderr), 4<<20)
		}
	}()
	testenv.Eventually(t, "the cap held", func() bool {
		return stream(logcap.Stdout) <= 4<<20+64<<10 && stream(logcap.Stderr) <= 4<<20+64<<10
	})
	if _, err := h.sup.EntrypointLogs(context.Background(), "filler", LogQuery{}); err != nil {
		t.Fatal(err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
