package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// Supervisor tests lease ports from 21000 up, 40 at a time.
var portBlock = testenv.PortBlock{Base: 21000, Size: 40}

type harness struct {
	t       *testing.T
	opts    Options
	sup     *Supervisor
	watcher *proc.Watcher
	// real runs the stub agent as real processes (the native runtime);
	// otherwise the fake runtime runs it in memory, on machine, which
	// outlives restarts as a machine's processes do.
	real    bool
	native  *native.Runtime
	machine *fake.Machine
}

// registry registers rt as the runtime named "native".
func registry(rt runtime.Runtime) *runtime.Registry {
	r := &runtime.Registry{}
	if err := r.Register("native", rt); err != nil {
		panic(err)
	}
	return r
}

// newHarness starts an in-process supervisor over the fake runtime: the
// state machine, locks, records and events, in milliseconds. Periodic
// work never runs by itself: tests call Check.
func newHarness(t *testing.T, tweak func(*Options)) *harness {
	t.Helper()
	return startHarness(t, false, tweak)
}

// realHarness is newHarness with the real stub agent, spawned by the
// native runtime: for what only real processes show (pids, signals,
// cgroups, what a child writes).
func realHarness(t *testing.T, tweak func(*Options)) *harness {
	t.Helper()
	return startHarness(t, true, tweak)
}

func startHarness(t *testing.T, real bool, tweak func(*Options)) *harness {
	t.Helper()
	lo, hi := portBlock.Next()
	h := &harness{t: t, real: real, machine: fake.NewMachine(), opts: Options{
		Root: t.TempDir(), PortLo: lo, PortHi: hi,
		StopGrace: 2 * time.Second, StartupTimeout: 30 * time.Second,
		CheckInterval: time.Hour, AutoStop: 0,
		Env: childenv.Policy{Base: map[string]string{"PATH": "/usr/bin:/bin"}},
	}}
	if tweak != nil {
		tweak(&h.opts)
	}
	h.start()
	root := h.opts.Root
	t.Cleanup(func() {
		h.close(true)
		testenv.KillSandboxes(root)
		h.machine.Shutdown()
	})
	return h
}

func (h *harness) start() {
	h.t.Helper()
	w, err := proc.NewWatcher()
	if err != nil {
		h.t.Fatal(err)
	}
	opts := h.opts
	if opts.Runtimes == nil && h.real {
		h.native = &native.Runtime{Watcher: w, Argv: testenv.StubArgv(h.t)}
		opts.Runtimes = registry(h.native)
	} else if opts.Runtimes == nil {
		opts.Runtimes = registry(&fake.Runtime{M: h.machine, LocalPort: true})
	}
	sup, err := New(context.Background(), opts)
	if err != nil {
		w.Close()
		h.t.Fatal(err)
	}
	h.sup, h.watcher = sup, w
}

// close stops the supervisor; with reap, its children too.
func (h *harness) close(reap bool) {
	if h.sup == nil {
		return
	}
	h.sup.opts.StopOnClose = reap
	h.sup.Close(context.Background())
	h.watcher.Close()
	h.sup = nil
}

// restart closes the supervisor without stopping children and starts a new
// one on the same root, as a daemon restart would.
func (h *harness) restart() {
	h.close(false)
	h.start()
}

func (h *harness) create(name string, env map[string]string, labels map[string]string) Sandbox {
	h.t.Helper()
	sb, err := h.sup.Create(context.Background(), CreateRequest{Name: name, Env: env, Labels: labels})
	if err != nil {
		h.t.Fatalf("create %s: %v", name, err)
	}
	return sb
}

func (h *harness) waitState(id string, want State) Sandbox {
	h.t.Helper()
	var sb Sandbox
	testenv.Eventually(h.t, id+" "+string(want), func() bool {
		var err error
		sb, err = h.sup.Get(id)
		return err == nil && sb.State == want
	})
	return sb
}

func (h *harness) pid(id string) int {
	if !h.real {
		h.t.Fatal("pid: only a realHarness has processes") // kill(0) would hit the test's own group
	}
	h.sup.mu.Lock()
	defer h.sup.mu.Unlock()
	var state struct{ PID int }
	if err := json.Unmarshal(h.sup.sandboxes[id].handle.State().Data, &state); err != nil {
		h.t.Fatal(err)
	}
	if state.PID <= 0 {
		h.t.Fatalf("pid of %s: %d", id, state.PID)
	}
	return state.PID
}

// answers reports whether something serves HTTP on the port.
func answers(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// offline gives a test the closed harness's root as the daemon sees it,
// to read and write records between runs.
func (h *harness) offline() *Supervisor {
	h.t.Helper()
	if h.sup != nil {
		h.t.Fatal("offline: the supervisor is running")
	}
	rfs, err := openRoot(h.opts.Root)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { rfs.Close() })
	return &Supervisor{fs: rfs, opts: h.opts}
}

// editRecord changes the record of sandbox id while the supervisor is
// closed.
func (h *harness) editRecord(id string, edit func(*Record)) {
	h.t.Helper()
	s := h.offline()
	r, err := s.readRecord(id)
	if err != nil {
		h.t.Fatal(err)
	}
	edit(&r)
	if err := s.writeRecord(id, r, true); err != nil {
		h.t.Fatal(err)
	}
}
