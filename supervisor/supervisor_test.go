// This file is long because its tests share the sandboxes and helpers
// declared here.

package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// TestLifecycle is long because it is one scenario whose steps build on
// each other: split, each part would need the state the one before left.
func TestLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	sb := h.create("alpha", map[string]string{"FOO": "bar"}, map[string]string{"origin": "cli", "team": "a"})
	if sb.State != Starting || sb.Port < h.opts.PortLo || sb.Port > h.opts.PortHi {
		t.Fatalf("created %+v", sb)
	}
	h.create("beta", nil, map[string]string{"origin": "web-ui", "team": "a"})
	sb = h.waitState("alpha", Started)
	if !answers(sb.Port) {
		t.Fatal("started sandbox does not answer on its port")
	}

	for _, tc := range []struct {
		filter Filter
		want   []string
	}{
		{Filter{}, []string{"alpha", "beta"}},
		{Filter{"team": "a"}, []string{"alpha", "beta"}},
		{Filter{"team": "a", "origin": "cli"}, []string{"alpha"}},
		{Filter{"origin": "nobody"}, nil},
	} {
		var got []string
		for _, s := range h.sup.List(tc.filter) {
			got = append(got, s.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("List(%v) = %v, want %v", tc.filter, got, tc.want)
		}
	}

	// The record is on disk and holds no env value; the env file is 0600.
	rec, _ := os.ReadFile(filepath.Join(h.opts.Root, "alpha", RecordFile))
	if strings.Contains(string(rec), "bar") {
		t.Fatalf("sandbox.json holds an env value:\n%s", rec)
	}
	fi, err := os.Stat(filepath.Join(h.opts.Root, "alpha", EnvFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("runtime-env.json: %v %v", fi, err)
	}
	var env map[string]string
	b, _ := os.ReadFile(filepath.Join(h.opts.Root, "alpha", EnvFile))
	json.Unmarshal(b, &env)
	// The variables, for redaction; the facts (id, port, workspace) are
	// the runtime's to add, as its workload sees them (runtimetest).
	if env["FOO"] != "bar" || env["PATH"] == "" {
		t.Fatalf("child env %v", env)
	}

	stopped, err := h.sup.Stop(context.Background(), "alpha", false)
	if err != nil || stopped.State != Stopped || stopped.ErrorReason != "" {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	if answers(sb.Port) {
		t.Fatal("stopped sandbox still answers")
	}
	if h.sup.ports.inUse() != 1 {
		t.Fatalf("ports in use after stop: %d, want 1", h.sup.ports.inUse())
	}
	// Stop is idempotent and terminal.
	if again, err := h.sup.Stop(context.Background(), "alpha", false); err != nil || again.State != Stopped {
		t.Fatalf("second stop: %+v %v", again, err)
	}
	if err := h.sup.Delete(context.Background(), "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.opts.Root, "alpha")); !os.IsNotExist(err) {
		t.Fatalf("directory left after delete: %v", err)
	}
	if _, err := h.sup.Get("alpha"); !isErr(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := h.sup.Delete(context.Background(), "alpha"); err != nil {
		t.Fatalf("delete of a missing sandbox: %v", err)
	}
	// A live sandbox is stopped by delete, and its port freed.
	if err := h.sup.Delete(context.Background(), "beta"); err != nil {
		t.Fatal(err)
	}
	if n := h.sup.ports.inUse(); n != 0 {
		t.Fatalf("ports in use after deleting all: %d", n)
	}
}

func TestNameConflict(t *testing.T) {
	h := newHarness(t, nil)
	h.create("same", nil, nil)
	_, err := h.sup.Create(context.Background(), CreateRequest{Name: "same"})
	if !isErr(err, ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
}

func TestCrashSeenAtOnce(t *testing.T) {
	h := realHarness(t, nil)
	sub, _ := h.sup.Subscribe(nil, nil)
	defer sub.Close()
	h.create("crashy", nil, nil)
	sb := h.waitState("crashy", Started)
	syscall.Kill(h.pid("crashy"), syscall.SIGKILL)
	// No reap tick runs (interval 1h) and nobody polls: the exit arrives
	// as an event.
	for ev := range sub.C {
		if ev.Type == EventStopped {
			if ev.Sandbox.ErrorReason != "killed by signal SIGKILL" || ev.Sandbox.StopReason != StopCrashed {
				t.Fatalf("stopped event %+v", ev.Sandbox)
			}
			break
		}
	}
	testenv.Eventually(t, "port released", func() bool { return h.sup.ports.inUse() == 0 })
	if answers(sb.Port) {
		t.Fatal("crashed sandbox's port still answers")
	}
}

func TestSIGTERMIgnoredThenKilled(t *testing.T) {
	h := realHarness(t, func(o *Options) { o.StopGrace = 300 * time.Millisecond })
	h.create("stubborn", map[string]string{"STUB_AGENT_IGNORE_SIGTERM": "1"}, nil)
	h.waitState("stubborn", Started)
	pid := h.pid("stubborn")
	if _, err := h.sup.Stop(context.Background(), "stubborn", false); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
		// Members may linger briefly as zombies of their new parent.
		testenv.Eventually(t, "group gone", func() bool { return syscall.Kill(-pid, 0) == syscall.ESRCH })
	}
}

func TestStartupFailures(t *testing.T) {
	tests := []struct {
		name      string
		timeout   time.Duration
		readyPath string
		command   []string // the default snapshot's; empty: the stub
		env       map[string]string
		want      string // the errorReason, or its start when it ends with " "
	}{
		// The reason says what the probe got, so that a user can fix it.
		{"never-ready", time.Second, "", nil, map[string]string{"STUB_AGENT_READY_DELAY_MS": "60000"}, "startup_timeout: GET /api/info "},
		{"wrong-ready-path", time.Second, "/nope?x=1", nil, nil, "startup_timeout: GET /nope?x=1 answered 404 Not Found"},
		{"nothing-listens", time.Second, "", []string{"sleep", "60"}, nil, "startup_timeout: GET /api/info got connection refused (nothing listens on the port)"},
		// A generous deadline: on a loaded machine the exit must still win.
		{"exits-early", time.Minute, "", nil, map[string]string{"STUB_AGENT_READY_DELAY_MS": "60000", "STUB_AGENT_EXIT_AFTER_MS": "1"}, "exited_during_startup: exit code 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := realHarness(t, func(o *Options) {
				o.StartupTimeout, o.ReadyPath = tc.timeout, tc.readyPath
				if tc.command != nil {
					o.Snapshots = []snapshot.Snapshot{{Name: snapshot.Default, Command: tc.command}}
				}
			})
			h.create(tc.name, tc.env, nil)
			sb := h.waitState(tc.name, Stopped)
			match := sb.ErrorReason == tc.want || strings.HasSuffix(tc.want, " ") && strings.HasPrefix(sb.ErrorReason, tc.want)
			if !match || sb.StopReason != StopStartupFailed {
				t.Fatalf("errorReason %q (%s), want %q", sb.ErrorReason, sb.StopReason, tc.want)
			}
			testenv.Eventually(t, "port released", func() bool { return h.sup.ports.inUse() == 0 })
		})
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	t.Run("spawn fails", func(t *testing.T) {
		h := realHarness(t, nil)
		h.native.Argv = []string{"/nonexistent/agent"}
		_, err := h.sup.Create(context.Background(), CreateRequest{Name: "broken"})
		// A program that is not there is the caller's (or the snapshot's)
		// to fix: a 4xx, not a server failure.
		if !errors.Is(err, ErrProgramNotFound) || CreateResult(err) != CreateInvalid {
			t.Fatalf("create: %v", err)
		}
		assertNothingLeft(t, h, "broken")
	})
	t.Run("ports exhausted", func(t *testing.T) {
		h := realHarness(t, func(o *Options) { o.PortHi = o.PortLo })
		h.create("first", nil, nil)
		_, err := h.sup.Create(context.Background(), CreateRequest{Name: "second"})
		if !isErr(err, ErrPortsExhausted) {
			t.Fatalf("create: %v, want ErrPortsExhausted", err)
		}
		assertNothingLeft(t, h, "second")
	})
	t.Run("unsupported runtime", func(t *testing.T) {
		h := realHarness(t, nil)
		_, err := h.sup.Create(context.Background(), CreateRequest{Name: "dock", Runtime: "docker"})
		if !isErr(err, ErrUnsupportedRuntime) {
			t.Fatalf("create: %v", err)
		}
		assertNothingLeft(t, h, "dock")
	})
}

func assertNothingLeft(t *testing.T, h *harness, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(h.opts.Root, name)); !os.IsNotExist(err) {
		t.Fatalf("directory left behind: %v", err)
	}
	if _, err := h.sup.Get(name); !isErr(err, ErrNotFound) {
		t.Fatalf("registry entry left behind: %v", err)
	}
	h.sup.ports.mu.Lock()
	defer h.sup.ports.mu.Unlock()
	for port, id := range h.sup.ports.used {
		if id == name {
			t.Fatalf("port %d leased to %s", port, name)
		}
	}
}

func TestConcurrentCreatesGetDistinctPorts(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PortHi = o.PortLo + 59 })
	const n = 50
	var wg sync.WaitGroup
	ports := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			sb, err := h.sup.Create(context.Background(), CreateRequest{Name: fmt.Sprintf("c%02d", i)})
			ports[i], errs[i] = sb.Port, err
		})
	}
	wg.Wait()
	seen := map[int]int{}
	for i, p := range ports {
		if errs[i] != nil {
			t.Fatalf("create c%02d: %v", i, errs[i])
		}
		if j, dup := seen[p]; dup {
			t.Fatalf("c%02d and c%02d share port %d", i, j, p)
		}
		seen[p] = i
	}
	for i := range n {
		h.waitState(fmt.Sprintf("c%02d", i), Started)
	}
}

func TestRestartReadoptsAndFlipsDead(t *testing.T) {
	h := realHarness(t, nil)
	live := h.create("live", nil, nil)
	h.create("doomed", nil, nil)
	h.waitState("live", Started)
	h.waitState("doomed", Started)
	doomedPID := h.pid("doomed")
	h.close(false)
	syscall.Kill(doomedPID, syscall.SIGKILL)
	testenv.Eventually(t, "doomed gone", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", doomedPID))
		return len(b) == 0 || strings.Contains(string(b), ") Z ")
	})
	h.start()

	got, err := h.sup.Get("live")
	if err != nil || got.State != Started || got.Port != live.Port {
		t.Fatalf("live after restart: %+v %v (port was %d)", got, err, live.Port)
	}
	dead, _ := h.sup.Get("doomed")
	if dead.State != Stopped || dead.ErrorReason != "exited; status unknown" {
		t.Fatalf("doomed after restart: %+v", dead)
	}
	// The adopted child is watched: stopping it works and frees its port.
	if _, err := h.sup.Stop(context.Background(), "live", false); err != nil {
		t.Fatal(err)
	}
	if answers(live.Port) {
		t.Fatal("re-adopted sandbox still answers after stop")
	}
	st := h.sup.Stats()
	if st.Rehydrates[RehydrateAdopted] != 1 || st.Rehydrates[RehydrateStopped] != 1 {
		t.Fatalf("rehydrate stats %v", st.Rehydrates)
	}
}

// A record whose PID now belongs to a foreign process flips to stopped and
// that process is never signalled.
func TestForeignPIDNeverSignalled(t *testing.T) {
	h := realHarness(t, nil)
	h.close(false)
	foreign := testenv.ForeignProcess(t)
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	off := h.offline()
	if err := off.fs.mkdir("victim"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := Record{
		Version: recordVersion, ID: "victim", RootID: off.fs.id, Runtime: "native", State: Started, Port: h.opts.PortLo,
		CreatedAt: now, UpdatedAt: now, LastActivityAt: now, Marker: "victim.deadbeef", StopGraceMs: 100,
		// This boot, another start time: the PID was reused.
		Handle: &runtime.HandleState{Version: 1, Data: json.RawMessage(fmt.Sprintf(`{"pid":%d,"pgid":%d,"startTime":1,"bootId":%q,"marker":"victim.deadbeef"}`, foreign, foreign, boot))},
	}
	if err := off.writeRecord("victim", rec, true); err != nil {
		t.Fatal(err)
	}
	h.start()
	sb, err := h.sup.Get("victim")
	if err != nil || sb.State != Stopped || !strings.Contains(sb.ErrorReason, "not signalled") {
		t.Fatalf("victim: %+v %v", sb, err)
	}
	// Stopping and deleting it must not touch the foreign process either.
	h.sup.Stop(context.Background(), "victim", true)
	h.sup.Delete(context.Background(), "victim")
	// A signal sent by mistake would end it at once: wait for that exit
	// on a pidfd (returning early if it comes), rather than sleep.
	fd, err := unix.PidfdOpen(foreign, 0)
	if err != nil {
		t.Fatalf("foreign process is gone: %v", err)
	}
	defer unix.Close(fd)
	if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 200); n != 0 {
		t.Fatal("foreign process exited after the stop and delete")
	}
	if err := syscall.Kill(foreign, 0); err != nil {
		t.Fatalf("foreign process is gone: %v", err)
	}
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(foreign, &ws, syscall.WNOHANG, nil); wpid != 0 {
		t.Fatalf("foreign process exited: %v", ws)
	}
}

// An unreadable record is left exactly as it is, across restarts, deletes
// and creates of its name: the daemon cannot prove the directory is its.
func TestUnreadableRecordLeftAlone(t *testing.T) {
	h := newHarness(t, nil)
	h.create("good", nil, nil)
	h.waitState("good", Started)
	h.close(false)
	bad := filepath.Join(h.opts.Root, "bad")
	os.MkdirAll(bad, 0o700)
	garbage := []byte(`{"version":2,"id":"bad",`)
	os.WriteFile(filepath.Join(bad, RecordFile), garbage, 0o600)
	// And an empty one, what a power loss can leave of a record fsynced
	// after its rename, beside a workspace the agent wrote to.
	empty := filepath.Join(h.opts.Root, "empty")
	os.MkdirAll(filepath.Join(empty, WorkspaceDir), 0o700)
	os.WriteFile(filepath.Join(empty, RecordFile), nil, 0o600)
	os.WriteFile(filepath.Join(empty, WorkspaceDir, "work"), []byte("the agent's"), 0o600)
	h.start()
	if _, err := h.sup.Get("good"); err != nil {
		t.Fatalf("good record lost: %v", err)
	}
	if _, err := h.sup.Get("empty"); !isErr(err, ErrNotFound) {
		t.Fatalf("empty record loaded: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(empty, WorkspaceDir, "work")); err != nil || string(b) != "the agent's" {
		t.Fatalf("the workspace beside an empty record: %q %v", b, err)
	}
	if _, err := h.sup.Get("bad"); !isErr(err, ErrNotFound) {
		t.Fatalf("corrupt record loaded: %v", err)
	}
	if err := h.sup.Delete(context.Background(), "bad"); err != nil {
		t.Fatalf("delete of a name with no sandbox: %v", err)
	}
	if _, err := h.sup.Create(context.Background(), CreateRequest{Name: "bad"}); !isErr(err, ErrConflict) {
		t.Fatalf("create over a directory that is not a sandbox: %v, want ErrConflict", err)
	}
	h.restart()
	if b, err := os.ReadFile(filepath.Join(bad, RecordFile)); err != nil || string(b) != string(garbage) {
		t.Fatalf("unreadable record changed: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(bad); len(ents) != 1 {
		t.Fatalf("directory of the unreadable record changed: %v", ents)
	}
}

// A create interrupted after its intent record but before the handle was
// recorded is swept: its process (found by marker) killed, its directory
// removed.
func TestInterruptedCreateSwept(t *testing.T) {
	h := realHarness(t, nil)
	h.create("half", nil, nil)
	h.waitState("half", Started)
	pid := h.pid("half")
	h.close(false)
	path := filepath.Join(h.opts.Root, "half", RecordFile)
	h.editRecord("half", func(r *Record) {
		r.Handle = nil
		r.State = Starting
	})
	h.start()
	if _, err := h.sup.Get("half"); !isErr(err, ErrNotFound) {
		t.Fatalf("interrupted create still listed: %v", err)
	}
	testenv.Eventually(t, "orphan killed", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return len(b) == 0 || strings.Contains(string(b), ") Z ")
	})
	// The directory goes once the marker has been swept again (a child
	// forked but not yet exec'd when the daemon died gets its marker late).
	testenv.Eventually(t, "directory of the interrupted create removed", func() bool {
		_, err := os.Stat(filepath.Dir(path))
		return os.IsNotExist(err)
	})
	testenv.Eventually(t, "the name free again", func() bool {
		_, err := h.sup.Create(context.Background(), CreateRequest{Name: "half"})
		return err == nil
	})
}

func TestSecondSupervisorRefused(t *testing.T) {
	h := newHarness(t, nil)
	_, err := New(context.Background(), Options{Root: h.opts.Root, PortLo: 1, PortHi: 2, Runtimes: registry(&fake.Runtime{M: fake.NewMachine()})})
	var locked *ErrRootLocked
	if !errorsAs(err, &locked) || locked.PID != os.Getpid() {
		t.Fatalf("second supervisor on the same root: %v", err)
	}
}

// A port held by another program is skipped, never handed out.
func TestForeignPortSkipped(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PortHi = o.PortLo + 1 })
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", h.opts.PortLo))
	if err != nil {
		t.Skipf("port %d is already taken by someone else: %v", h.opts.PortLo, err)
	}
	defer l.Close()
	sb := h.create("skips", nil, nil)
	if sb.Port != h.opts.PortLo+1 {
		t.Fatalf("leased port %d, want %d (the first is held by another program)", sb.Port, h.opts.PortLo+1)
	}
	h.waitState("skips", Started)
	if _, err := h.sup.Create(context.Background(), CreateRequest{Name: "none-left"}); !isErr(err, ErrPortsExhausted) {
		t.Fatalf("third create: %v, want ErrPortsExhausted", err)
	}
}

// A record written by a daemon before handles were versioned (record
// version 2, the native handle's data bare) is still re-adopted.
func TestVersion2RecordReadopted(t *testing.T) {
	h := realHarness(t, nil)
	h.create("old", nil, nil)
	h.waitState("old", Started)
	pid := h.pid("old")
	h.close(false)
	path := filepath.Join(h.opts.Root, "old", RecordFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	json.Unmarshal(b, &r)
	r["version"] = 2
	r["handle"] = r["handle"].(map[string]any)["data"]
	b, _ = json.Marshal(r)
	os.WriteFile(path, b, 0o600)
	h.start()
	sb, err := h.sup.Get("old")
	if err != nil || sb.State != Started || h.pid("old") != pid {
		t.Fatalf("after restart: %+v %v (pid %d, was %d)", sb, err, h.pid("old"), pid)
	}
}

// A runtime name that is not registered is refused with the names that
// are, and leaves nothing behind.
func TestUnknownRuntimeListsRegistered(t *testing.T) {
	h := newHarness(t, nil)
	_, err := h.sup.Create(context.Background(), CreateRequest{Name: "x", Runtime: "firecracker"})
	if !isErr(err, ErrUnsupportedRuntime) || !strings.Contains(err.Error(), "native") {
		t.Fatalf("create: %v", err)
	}
	if got := h.sup.Runtimes(); len(got) != 1 || got[0] != "native" {
		t.Fatalf("Runtimes() = %v", got)
	}
	assertNothingLeft(t, h, "x")
}

type countingRuntime struct {
	runtime.Runtime
	deletes atomic.Int32
}

type countingHandle struct {
	runtime.Handle
	deletes *atomic.Int32
}

func (c *countingRuntime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	h, err := c.Runtime.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return countingHandle{h, &c.deletes}, nil
}

func (h countingHandle) Delete(ctx context.Context) error {
	h.deletes.Add(1)
	return h.Handle.Delete(ctx)
}

// The runtime's Delete runs once per workload, whether it was stopped or
// exited by itself, and not again when the sandbox is deleted.
func TestRuntimeDeleteOncePerWorkload(t *testing.T) {
	var rt *countingRuntime
	h := realHarness(t, func(o *Options) {
		w, err := proc.NewWatcher()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		rt = &countingRuntime{Runtime: &native.Runtime{Watcher: w, Argv: testenv.StubArgv(t)}}
		o.Runtimes = registry(rt)
	})
	h.create("stopped", nil, nil)
	h.waitState("stopped", Started)
	if _, err := h.sup.Stop(context.Background(), "stopped", true); err != nil {
		t.Fatal(err)
	}
	if n := rt.deletes.Load(); n != 1 {
		t.Fatalf("after a stop: %d deletes, want 1", n)
	}
	h.create("crashed", nil, nil)
	h.waitState("crashed", Started)
	syscall.Kill(h.pid("crashed"), syscall.SIGKILL)
	sb := h.waitState("crashed", Stopped)
	if sb.ErrorReason != "killed by signal SIGKILL" {
		t.Errorf("errorReason %q", sb.ErrorReason)
	}
	testenv.Eventually(t, "delete after the exit", func() bool { return rt.deletes.Load() == 2 })
	for _, id := range []string{"stopped", "crashed"} {
		if err := h.sup.Delete(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	if n := rt.deletes.Load(); n != 2 {
		t.Fatalf("after deleting both: %d deletes, want 2", n)
	}
}
