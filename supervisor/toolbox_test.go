package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
)

// Sixteen creates at once for one sandbox make MaxSessionsPerSandbox
// sessions, no more: the place is taken under the lock that counts.
func TestSessionCreatesRaced(t *testing.T) {
	h := realHarness(t, nil)
	h.create("s1", nil, nil)
	h.waitState("s1", Started)
	var wg sync.WaitGroup
	var mu sync.Mutex
	made, busy := 0, 0
	for i := range 2 * MaxSessionsPerSandbox {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.sup.CreateSession("s1", fmt.Sprint("r", i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made++
			case isErr(err, ErrBusy):
				busy++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	list, _ := h.sup.Sessions("s1")
	if made != MaxSessionsPerSandbox || busy != MaxSessionsPerSandbox || len(list) != MaxSessionsPerSandbox {
		t.Fatalf("%d made, %d refused, %d listed", made, busy, len(list))
	}
	for _, s := range list {
		if err := h.sup.DeleteSession("s1", s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.sup.tools.count; n != 0 {
		t.Fatalf("%d sessions counted after every one was deleted", n)
	}
}

// A create for a sandbox that does not exist (or does not run) keeps
// nothing: 4,000 of them with 100 KB ids leave the heap as it was.
func TestSessionCreatesForUnknownSandboxesKeepNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.create("stopped", nil, nil)
	h.waitState("stopped", Started)
	if _, err := h.sup.Stop(t.Context(), "stopped", false); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 4000 {
		id := fmt.Sprintf("%d-%s", i, strings.Repeat("x", 100_000))
		if _, err := h.sup.CreateSession(id, "s"); !isErr(err, ErrNotFound) && !isErr(err, ErrInvalid) {
			t.Fatalf("create for an unknown id: %v", err)
		}
	}
	if _, err := h.sup.CreateSession("stopped", "s"); !isErr(err, ErrNotRunning) {
		t.Fatalf("create in a stopped sandbox: %v", err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := len(h.sup.tools.sessions); n != 0 {
		t.Fatalf("%d sandboxes have a session map", n)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Fatalf("the heap grew %d bytes", grown)
	}
}

// A workspace or a variables file replaced by a link while the sandbox
// was stopped is refused where it is met, not followed, and left as it
// is: the start (native chdir, docker bind, the toolbox), and a read of
// the variables' names.
func TestLinksPlantedWhileStopped(t *testing.T) {
	h := newHarness(t, nil)
	h.create("w", nil, nil)
	h.waitState("w", Started)
	if _, err := h.sup.Stop(t.Context(), "w", false); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	ws := filepath.Join(h.opts.Root, "w", WorkspaceDir)
	os.RemoveAll(ws)
	os.Symlink(elsewhere, ws)
	if _, err := h.sup.Start(t.Context(), "w"); !isErr(err, ErrTampered) {
		t.Fatalf("start with a linked workspace: %v", err)
	}
	if fi, err := os.Lstat(ws); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was not left as it is: %v %v", fi, err)
	}
	env := filepath.Join(h.opts.Root, "w", EnvFile)
	os.Rename(env, filepath.Join(elsewhere, "env.json"))
	os.Symlink(filepath.Join(elsewhere, "env.json"), env)
	if _, err := h.sup.EnvKeys("w"); !isErr(err, ErrTampered) {
		t.Fatalf("the variables through a link: %v", err)
	}
}

// countingChecker is a runtime that counts how often it is asked whether
// it can start workloads.
type countingChecker struct {
	*fake.Runtime
	n atomic.Int64
}

func (c *countingChecker) Check(context.Context) error { c.n.Add(1); return nil }

// The engine is asked at most once per UnavailableTTL, whatever the
// number of callers asking, unauthenticated ones too (it was pinged on
// every one).
func TestUnavailableAsksOncePerTTL(t *testing.T) {
	cc := &countingChecker{}
	h := newHarness(t, func(o *Options) {})
	cc.Runtime = &fake.Runtime{M: h.machine, LocalPort: true}
	h.close(true)
	h.opts.Runtimes = registry(cc)
	h.start()
	for range 200 {
		h.sup.Unavailable(t.Context())
	}
	if n := cc.n.Load(); n != 1 {
		t.Fatalf("the runtime was asked %d times", n)
	}
}
