package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

func dur(d time.Duration) *time.Duration { return &d }

// clockHarness is a harness whose clock only moves when the test says.
func clockHarness(t *testing.T, tweak func(*Options)) (*harness, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	h := newHarness(t, func(o *Options) {
		o.Now = clock.Now
		o.AutoStop = 15 * time.Minute
		if tweak != nil {
			tweak(o)
		}
	})
	return h, clock
}

func TestAutoStopIdle(t *testing.T) {
	h, clock := clockHarness(t, nil)
	sb := h.create("idle", nil, nil)
	h.waitState("idle", Started)
	if sb.AutoStopInterval != 15*time.Minute || !sb.AutoStopAt().Equal(sb.LastActivityAt.Add(15*time.Minute)) {
		t.Fatalf("default auto-stop not applied: %v at %v", sb.AutoStopInterval, sb.AutoStopAt())
	}
	clock.Advance(15*time.Minute - time.Millisecond)
	h.sup.Check()
	if got, _ := h.sup.Get("idle"); got.State != Started {
		t.Fatalf("stopped before its interval: %+v", got)
	}
	clock.Advance(time.Millisecond)
	h.sup.Check()
	got, _ := h.sup.Get("idle")
	if got.State != Stopped || got.ErrorReason != ReasonAutoStopped || got.StopReason != StopAutoStopped {
		t.Fatalf("after interval: %+v", got)
	}
	if answers(got.Port) || h.sup.ports.inUse() != 0 {
		t.Fatal("auto-stopped sandbox still holds its port")
	}
	// Persisted: the reason survives a restart.
	h.restart()
	if got, _ := h.sup.Get("idle"); got.ErrorReason != ReasonAutoStopped {
		t.Fatalf("after restart: %+v", got)
	}
}

func TestRefreshActivityResetsTimerReadsDoNot(t *testing.T) {
	h, clock := clockHarness(t, nil)
	h.create("kept", nil, nil)
	h.waitState("kept", Started)
	sub, _ := h.sup.Subscribe(nil, nil)
	defer sub.Close()
	clock.Advance(10 * time.Minute)
	if err := h.sup.RefreshActivity("kept"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Minute) // 20 min since create, 10 since keep-alive
	h.sup.Check()
	if got, _ := h.sup.Get("kept"); got.State != Started {
		t.Fatalf("stopped despite keep-alive: %+v", got)
	}
	// Reads of every kind, then the timer runs out anyway.
	for range 5 {
		h.sup.Get("kept")
		h.sup.List(nil)
		h.sup.EntrypointLogs(context.Background(), "kept", LogQuery{})
		s, _ := h.sup.Subscribe(nil, nil)
		s.Close()
		h.sup.Stats()
	}
	clock.Advance(5 * time.Minute)
	h.sup.Check()
	if got, _ := h.sup.Get("kept"); got.State != Stopped || got.ErrorReason != ReasonAutoStopped {
		t.Fatalf("reads kept it alive: %+v", got)
	}
	// A keep-alive on a stopped sandbox fails rather than masking the stop.
	if err := h.sup.RefreshActivity("kept"); !isErr(err, ErrNotRunning) {
		t.Fatalf("refresh of a stopped sandbox: %v", err)
	}
}

// The daemon is blind to the workload: a sandbox serving traffic with no
// keep-alive caller stops on schedule.
func TestBusySandboxWithoutKeepAliveStops(t *testing.T) {
	h, clock := clockHarness(t, nil)
	sb := h.create("busy", nil, nil)
	h.waitState("busy", Started)
	url := "http://127.0.0.1:" + strconv.Itoa(sb.Port) + "/api/info"
	for range 20 {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	clock.Advance(15 * time.Minute)
	h.sup.Check()
	if got, _ := h.sup.Get("busy"); got.State != Stopped || got.ErrorReason != ReasonAutoStopped {
		t.Fatalf("busy sandbox: %+v", got)
	}
}

func TestAutoStopZeroDisablesAndStartingIsSpared(t *testing.T) {
	h, clock := clockHarness(t, func(o *Options) { o.StartupTimeout = time.Hour })
	sb, err := h.sup.Create(context.Background(), CreateRequest{Name: "forever", AutoStopInterval: dur(0)})
	if err != nil || !sb.AutoStopAt().IsZero() {
		t.Fatalf("create: %+v %v", sb, err)
	}
	h.create("slow", map[string]string{"STUB_AGENT_READY_DELAY_MS": "600000"}, nil)
	h.waitState("forever", Started)
	// A non-zero interval set later counts as activity and applies.
	clock.Advance(24 * time.Hour)
	h.sup.Check()
	if got, _ := h.sup.Get("forever"); got.State != Started {
		t.Fatalf("autostop 0 stopped: %+v", got)
	}
	if got, _ := h.sup.Get("slow"); got.State != Starting {
		t.Fatalf("a starting sandbox was auto-stopped: %+v", got)
	}
	got, err := h.sup.SetAutoStop("forever", time.Minute)
	if err != nil || got.AutoStopInterval != time.Minute || !got.LastActivityAt.Equal(clock.Now()) {
		t.Fatalf("set autostop: %+v %v", got, err)
	}
	clock.Advance(time.Minute)
	h.sup.Check()
	if got, _ := h.sup.Get("forever"); got.State != Stopped {
		t.Fatalf("after setting 1 min: %+v", got)
	}
}

func TestMaxLifetime(t *testing.T) {
	h, clock := clockHarness(t, func(o *Options) { o.MaxLifetime = time.Hour })
	h.create("old", nil, nil)
	h.waitState("old", Started)
	for range 6 {
		clock.Advance(10 * time.Minute)
		h.sup.RefreshActivity("old")
		h.sup.Check()
	}
	if got, _ := h.sup.Get("old"); got.State != Stopped || got.ErrorReason != ReasonMaxLifetime {
		t.Fatalf("kept-alive sandbox past max lifetime: %+v", got)
	}
}

func TestAutoDelete(t *testing.T) {
	h, clock := clockHarness(t, nil)
	cases := []struct {
		name   string
		ad     *time.Duration
		exists func(elapsed time.Duration) bool
	}{
		{"absent", nil, func(time.Duration) bool { return true }},
		{"never", dur(-time.Minute), func(time.Duration) bool { return true }},
		{"immediately", dur(0), func(time.Duration) bool { return false }},
		{"after-ten", dur(10 * time.Minute), func(e time.Duration) bool { return e < 10*time.Minute }},
	}
	for _, c := range cases {
		if _, err := h.sup.Create(context.Background(), CreateRequest{Name: c.name, AutoDeleteInterval: c.ad}); err != nil {
			t.Fatal(err)
		}
		h.waitState(c.name, Started)
		if _, err := h.sup.Stop(context.Background(), c.name, true); err != nil {
			t.Fatal(err)
		}
	}
	check := func(elapsed time.Duration) {
		t.Helper()
		for _, c := range cases {
			_, err := h.sup.Get(c.name)
			_, statErr := os.Stat(filepath.Join(h.opts.Root, c.name))
			if exists := err == nil; exists != c.exists(elapsed) || exists != (statErr == nil) {
				t.Fatalf("%s at +%v: exists=%v dir=%v, want %v", c.name, elapsed, exists, statErr == nil, c.exists(elapsed))
			}
		}
	}
	check(0)
	clock.Advance(9 * time.Minute)
	h.sup.Check()
	check(9 * time.Minute)
	clock.Advance(time.Minute)
	h.sup.Check()
	check(10 * time.Minute)
	clock.Advance(1000 * time.Hour)
	h.sup.Check()
	check(1000 * time.Hour)
}

// The check loop runs by itself at the configured interval.
func TestCheckLoopRuns(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.CheckInterval = 20 * time.Millisecond
		o.AutoStop = 300 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.sup.RunChecks(ctx)
	h.create("brief", nil, nil)
	sb := h.waitState("brief", Stopped)
	if sb.ErrorReason != ReasonAutoStopped {
		t.Fatalf("reason %q", sb.ErrorReason)
	}
	testenv.Eventually(t, "port freed", func() bool { return h.sup.ports.inUse() == 0 })
}

// A runtime whose workload serves elsewhere gets no port: readiness is
// probed at the endpoint its handle reports, which the sandbox shows and
// keeps across a restart.
func TestWorkloadServingElsewhere(t *testing.T) {
	m := fake.NewMachine()
	t.Cleanup(m.Shutdown)
	h := newHarness(t, func(o *Options) { o.Runtimes = registry(&fake.Runtime{M: m}) })
	h.create("away", nil, nil)
	sb := h.waitState("away", Started)
	if sb.Port != 0 || h.sup.ports.inUse() != 0 {
		t.Fatalf("a runtime without LocalPort got port %d (%d leased)", sb.Port, h.sup.ports.inUse())
	}
	if sb.Endpoint.IsZero() {
		t.Fatal("no endpoint")
	}
	h.restart()
	again := h.waitState("away", Started)
	if again.Endpoint != sb.Endpoint {
		t.Fatalf("endpoint after restart %+v, want %+v", again.Endpoint, sb.Endpoint)
	}
	stopped, err := h.sup.Stop(context.Background(), "away", false)
	if err != nil || stopped.State != Stopped {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
}

// A stopped sandbox starts again in place: its files kept, its reasons
// cleared, a fresh workload under a new marker, sandbox.starting then
// sandbox.started on the feed; starting a running one changes nothing.
func TestStartAgainInPlace(t *testing.T) {
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "fake", true: "native"}[real], func(t *testing.T) {
			h := startHarness(t, real, nil)
			h.create("again", map[string]string{"FOO": "kept", "STUB_AGENT_SERVE_ENV": "1"}, map[string]string{"team": "a"})
			h.waitState("again", Started)
			file := filepath.Join(h.opts.Root, "again", WorkspaceDir, "notes.txt")
			if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := h.sup.owned().Known
			if _, err := h.sup.Stop(context.Background(), "again", false); err != nil {
				t.Fatal(err)
			}
			sub, _ := h.sup.Subscribe(nil, nil)
			defer sub.Close()
			sb, err := h.sup.Start(context.Background(), "again")
			if err != nil || sb.State != Starting || sb.StopReason != "" || !sb.StoppedAt.IsZero() {
				t.Fatalf("start again: %+v %v", sb, err)
			}
			sb = h.waitState("again", Started)
			if b, err := os.ReadFile(file); err != nil || string(b) != "mine" {
				t.Fatalf("the workspace's file after the start: %q %v", b, err)
			}
			if sb.Labels["team"] != "a" || sb.Port == 0 || !answers(sb.Port) {
				t.Fatalf("after the start: %+v", sb)
			}
			for m := range h.sup.owned().Known {
				if before[m] {
					t.Fatalf("the marker %s was used again", m)
				}
			}
			var types []string
			for len(types) < 2 {
				select {
				case ev := <-sub.C:
					types = append(types, ev.Type)
				case <-time.After(time.Minute):
					t.Fatalf("events %v", types)
				}
			}
			if types[0] != EventStarting || types[1] != EventStarted {
				t.Fatalf("events %v, want starting then started", types)
			}
			if again, err := h.sup.Start(context.Background(), "again"); err != nil || again.State != Started || again.StartedAt != sb.StartedAt {
				t.Fatalf("start of a running sandbox: %+v %v", again, err)
			}
			if real {
				resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(sb.Port) + "/api/env")
				if err != nil {
					t.Fatal(err)
				}
				var env []string
				json.NewDecoder(resp.Body).Decode(&env)
				resp.Body.Close()
				if !slices.Contains(env, "FOO=kept") || !slices.Contains(env, "PORT="+strconv.Itoa(sb.Port)) {
					t.Fatalf("the environment after the start: %v", env)
				}
			}
		})
	}
}

// A start again cut by a daemon's death, after the intent and before the
// workload was recorded: the next daemon sweeps what runs under the
// intent's marker and keeps the sandbox stopped, with its files.
func TestInterruptedStartAgainSwept(t *testing.T) {
	h := newHarness(t, nil)
	h.create("cut", nil, nil)
	h.waitState("cut", Started)
	if _, err := h.sup.Stop(context.Background(), "cut", false); err != nil {
		t.Fatal(err)
	}
	h.close(false)
	// What the cut start left: the intent in the record, and a workload
	// running under its marker.
	marker := newMarker("cut")
	h.editRecord("cut", func(r *Record) { r.StartingMarker = marker })
	rt := &fake.Runtime{M: h.machine, LocalPort: true}
	left, err := rt.Start(context.Background(), runtime.Spec{ID: "cut", Marker: marker, Port: testenv.FreePort(t), Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	select {
	case <-left.Done():
	case <-time.After(time.Minute):
		t.Fatal("the interrupted start's workload was not swept")
	}
	sb, err := h.sup.Get("cut")
	if err != nil || sb.State != Stopped {
		t.Fatalf("after the restart: %+v %v", sb, err)
	}
	if _, err := os.Stat(filepath.Join(h.opts.Root, "cut", WorkspaceDir)); err != nil {
		t.Fatalf("the workspace: %v", err)
	}
	// Once swept, the intent is cleared: the next start does not sweep
	// it again (before, every start did).
	testenv.Eventually(t, "the intent cleared", func() bool {
		b, err := os.ReadFile(filepath.Join(h.opts.Root, "cut", RecordFile))
		return err == nil && !strings.Contains(string(b), "startingMarker")
	})
	if sb, err := h.sup.Start(context.Background(), "cut"); err != nil || sb.State != Starting {
		t.Fatalf("start after the sweep: %+v %v", sb, err)
	}
	h.waitState("cut", Started)
}

// A start again cut by a daemon's SIGKILL while its workload starts: the
// next daemon counts the startup budget from that start, not from the
// sandbox's creation (a healthy workload of an old sandbox was killed
// within milliseconds of the restart).
func TestStartupBudgetFromTheStartAgain(t *testing.T) {
	h := realHarness(t, func(o *Options) { o.StartupTimeout = 20 * time.Second })
	h.create("old", map[string]string{"STUB_AGENT_READY_DELAY_MS": "1500"}, nil)
	h.waitState("old", Started)
	if _, err := h.sup.Stop(context.Background(), "old", false); err != nil {
		t.Fatal(err)
	}
	// Created long ago, as far as its record says.
	h.close(false)
	h.editRecord("old", func(r *Record) { r.CreatedAt = r.CreatedAt.Add(-time.Hour) })
	h.start()
	if sb, err := h.sup.Start(context.Background(), "old"); err != nil || sb.State != Starting {
		t.Fatalf("start: %+v %v", sb, err)
	}
	h.restart() // while it starts
	sb := h.waitState("old", Started)
	if sb.StopReason != "" {
		t.Fatalf("after the restart: %+v", sb)
	}
}

// watching counts the goroutines in the supervisor's watch.
func watching() int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "supervisor.(*Supervisor).watch.func")
}

// A live sandbox costs no goroutine once it has started: its exit is
// handled when it comes.
func TestNoGoroutinePerLiveSandbox(t *testing.T) {
	h := realHarness(t, nil)
	const n = 8
	base := goruntime.NumGoroutine()
	for i := range n {
		h.create(fmt.Sprintf("live%d", i), nil, nil)
	}
	for i := range n {
		h.waitState(fmt.Sprintf("live%d", i), Started)
	}
	testenv.Eventually(t, "no goroutine in watch", func() bool { return watching() == 0 })
	// Whatever its functions are called: n live sandboxes do not cost n
	// goroutines.
	testenv.Eventually(t, "fewer goroutines than live sandboxes", func() bool { return goruntime.NumGoroutine()-base < n })
	if err := syscall.Kill(h.pid("live3"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if sb := h.waitState("live3", Stopped); sb.StopReason != StopCrashed {
		t.Fatalf("killed sandbox: %+v", sb)
	}
	if sb, err := h.sup.Get("live4"); err != nil || sb.State != Started {
		t.Fatalf("a bystander: %+v %v", sb, err)
	}
}
