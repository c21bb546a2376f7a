// This file is long because its tests share the real children, pidfds
// and helpers declared here.

package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func marker(t *testing.T) string {
	b := make([]byte, 8)
	rand.Read(b)
	return t.Name() + "-" + hex.EncodeToString(b)
}

func shSpec(t *testing.T, script string) Spec {
	dir := t.TempDir()
	return Spec{
		Argv:   []string{"/bin/sh", "-c", script},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Dir:    dir,
		Stdout: filepath.Join(dir, "stdout.log"),
		Stderr: filepath.Join(dir, "stderr.log"),
		Marker: marker(t),
	}
}

func spawnT(t *testing.T, w *Watcher, spec Spec) *Process {
	t.Helper()
	p, err := w.Spawn(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background(), 0) })
	return p
}

func waitDone(t *testing.T, p *Process) ExitStatus {
	t.Helper()
	select {
	case <-p.Done():
		return p.Status()
	case <-time.After(30 * time.Second):
		t.Fatal("process did not exit")
	}
	return ExitStatus{}
}

func exited(p *Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state != 'Z'
}

func TestExitStatus(t *testing.T) {
	w := newWatcher(t)
	tests := []struct {
		name   string
		script string
		want   ExitStatus
	}{
		{"clean exit", "exit 0", ExitStatus{Known: true, Code: 0}},
		{"exit code", "exit 3", ExitStatus{Known: true, Code: 3}},
		{"killed", "kill -9 $$", ExitStatus{Known: true, Code: 137, Signal: unix.SIGKILL}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := spawnT(t, w, shSpec(t, tc.script))
			got := waitDone(t, p)
			if got.At.IsZero() {
				t.Fatalf("status %+v has no exit time", got)
			}
			if got.At = (time.Time{}); got != tc.want {
				t.Fatalf("status %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSpawnDetachedWithMarkerAndLogs(t *testing.T) {
	w := newWatcher(t)
	spec := shSpec(t, `echo out; echo err >&2; read x; echo "stdin:$x:"; exec sleep 60`)
	p := spawnT(t, w, spec)
	id := p.Identity()
	if id.PGID != id.PID {
		t.Fatalf("pgid %d != pid %d", id.PGID, id.PID)
	}
	sid, err := unix.Getsid(id.PID)
	if err != nil || sid != id.PID {
		t.Fatalf("child is not a session leader: sid %d, %v", sid, err)
	}
	if m, err := readMarker(id.PID, p.pidfd); m != spec.Marker || err != nil {
		t.Fatalf("marker not in environ: %q %v", m, err)
	}
	testenv.Eventually(t, "logs", func() bool {
		out, _ := os.ReadFile(spec.Stdout)
		errb, _ := os.ReadFile(spec.Stderr)
		return string(out) == "out\nstdin::\n" && string(errb) == "err\n"
	})
	if fi, _ := os.Stat(spec.Stdout); fi.Mode().Perm() != 0o600 {
		t.Fatalf("stdout mode %v", fi.Mode().Perm())
	}
}

// A marker smuggled into the environment is dropped: only the spec's own
// marker identifies the process.
func TestForeignMarkerDropped(t *testing.T) {
	w := newWatcher(t)
	spec := shSpec(t, "exec sleep 60")
	spec.Env = append(spec.Env, MarkerEnv+"=someone-else")
	p := spawnT(t, w, spec)
	var env []byte
	testenv.Eventually(t, "environ readable", func() bool {
		env, _ = readProc(p.Identity().PID, "environ")
		return len(env) > 0 // empty for an instant while sh execs sleep
	})
	if strings.Count(string(env), MarkerEnv+"=") != 1 || markerIn(env) != spec.Marker {
		t.Fatalf("environ %q: want exactly our marker", env)
	}
}

func TestKillNineSeenWithoutPolling(t *testing.T) {
	w := newWatcher(t)
	p := spawnT(t, w, shSpec(t, "exec sleep 60"))
	if err := unix.Kill(p.Identity().PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := waitDone(t, p)
	if st.Signal != unix.SIGKILL || st.Code != 137 {
		t.Fatalf("status %+v", st)
	}
}

// A grandchild that keeps stdout open must neither hide the leader's exit
// nor outlive the sandbox.
func TestGrandchildHoldingStdout(t *testing.T) {
	w := newWatcher(t)
	dir := t.TempDir()
	spec := shSpec(t, `sleep 300 & echo $! > `+dir+`/gc; exec sleep 300`)
	p := spawnT(t, w, spec)
	var gc int
	testenv.Eventually(t, "grandchild pid", func() bool {
		b, _ := os.ReadFile(dir + "/gc")
		gc, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return gc > 0
	})
	unix.Kill(p.Identity().PID, unix.SIGKILL)
	waitDone(t, p)
	testenv.Eventually(t, "grandchild killed", func() bool { return !alive(gc) })
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	w := newWatcher(t)
	dir := t.TempDir()
	p := spawnT(t, w, shSpec(t, `trap '' TERM; touch `+dir+`/ready; while :; do sleep 0.05; done`))
	testenv.Eventually(t, "trap installed", func() bool { _, err := os.Stat(dir + "/ready"); return err == nil })
	st, err := p.Stop(context.Background(), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != unix.SIGKILL {
		t.Fatalf("status %v, want killed by SIGKILL", st)
	}
	pgid := p.Identity().PGID
	// Killed members linger as zombies until their new parent reaps them.
	testenv.Eventually(t, "group gone", func() bool { return errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) })
}

func TestStopGraceful(t *testing.T) {
	w := newWatcher(t)
	p := spawnT(t, w, shSpec(t, "exec sleep 60"))
	st, err := p.Stop(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != unix.SIGTERM {
		t.Fatalf("status %v, want killed by SIGTERM", st)
	}
	if _, err := p.Stop(context.Background(), time.Second); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestAdoptAfterWatcherRestart(t *testing.T) {
	w1, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	p1, err := w1.Spawn(shSpec(t, "exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	id := p1.Identity()
	w1.Close()
	t.Cleanup(func() {
		unix.Kill(-id.PGID, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(id.PID, &ws, 0, nil)
	})

	w2 := newWatcher(t)
	p2, err := w2.Adopt(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Stop(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := p2.Status(); st.Known {
		t.Fatalf("adopted process claims a known status: %v", st)
	}
}

// A recorded PID that now names a foreign process is never signalled.
func TestAdoptRefusesForeignProcess(t *testing.T) {
	foreign := testenv.ForeignProcess(t)
	boot, _ := BootID()
	st, err := readStat(foreign)
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher(t)
	cases := []struct {
		name string
		id   Identity
		want error
	}{
		{"no marker", Identity{PID: foreign, PGID: foreign, StartTime: st.startTime, BootID: boot, Marker: "m"}, ErrIdentity},
		{"other start time", Identity{PID: foreign, PGID: foreign, StartTime: st.startTime + 1, BootID: boot, Marker: "m"}, ErrIdentity},
		{"other boot", Identity{PID: foreign, PGID: foreign, StartTime: st.startTime, BootID: "x", Marker: "m"}, ErrNotFound},
		{"gone", Identity{PID: 1 << 30, BootID: boot, Marker: "m"}, ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := w.Adopt(tc.id); !errors.Is(err, tc.want) {
				t.Fatalf("adopt: %v, want %v", err, tc.want)
			}
		})
	}
	if n, _ := KillMarked("m", ""); n != 0 {
		t.Fatalf("KillMarked signalled %d processes; none carries the marker", n)
	}
	if !alive(foreign) {
		t.Fatal("foreign process was signalled")
	}
}

// A record whose process group was changed to a stranger's does not
// choose whom to kill: the identity fails, and the stranger and our child
// are left as they were (the child is then found by its marker).
func TestAdoptRefusesPlantedGroup(t *testing.T) {
	stranger := testenv.ForeignProcess(t)
	w1 := newWatcher(t)
	// sleep itself, not sh exec'ing it: a process in the middle of execve
	// shows no environment, and a scan would miss its marker.
	spec := shSpec(t, "")
	spec.Argv = []string{"/bin/sleep", "60"}
	p, err := w1.Spawn(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background(), 0) })
	id := p.Identity()
	id.PGID = stranger
	w2 := newWatcher(t)
	if _, err := w2.Adopt(id); !errors.Is(err, ErrIdentity) {
		t.Fatalf("adopt with a planted group: %v, want ErrIdentity", err)
	}
	if !alive(stranger) || !alive(id.PID) {
		t.Fatal("a process was signalled")
	}
	if n, _ := KillMarked(id.Marker); n != 1 {
		t.Fatalf("KillMarked signalled %d processes, want our child only", n)
	}
	waitDone(t, p)
	if !alive(stranger) {
		t.Fatal("the stranger was signalled")
	}
}

// A link or a FIFO where a log should be is refused at spawn, at once,
// and the link's target is untouched.
func TestSpawnRefusesPlantedLogs(t *testing.T) {
	w := newWatcher(t)
	outside := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(outside, []byte("precious\n"), 0o600)
	link := shSpec(t, "echo hello")
	os.Symlink(outside, link.Stdout)
	if _, err := w.Spawn(link); err == nil {
		t.Fatal("spawned with stdout.log a symbolic link")
	}
	if b, _ := os.ReadFile(outside); string(b) != "precious\n" {
		t.Fatalf("link target changed: %q", b)
	}
	fifo := shSpec(t, "echo hello")
	if err := unix.Mkfifo(fifo.Stderr, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Spawn(fifo); err == nil {
		t.Fatal("spawned with stderr.log a FIFO")
	}
}

// KillMarked kills exactly the processes carrying the given markers.
func TestKillMarked(t *testing.T) {
	w := newWatcher(t)
	a, b, other := shSpec(t, "exec sleep 60"), shSpec(t, "exec sleep 60"), shSpec(t, "exec sleep 60")
	pa, pb, po := spawnT(t, w, a), spawnT(t, w, b), spawnT(t, w, other)
	foreign := testenv.ForeignProcess(t)
	// While sh execs sleep, environ is briefly empty: poll.
	killed := 0
	testenv.Eventually(t, "marked processes killed", func() bool {
		n, _ := KillMarked(a.Marker, b.Marker)
		killed += n
		return exited(pa) && exited(pb)
	})
	if killed != 2 {
		t.Fatalf("KillMarked reported %d kills, want 2", killed)
	}
	if exited(po) || !alive(foreign) {
		t.Fatal("KillMarked signalled a process without one of its markers")
	}
}

// Many callers of the watcher's KillMarked at once share scans of /proc:
// the markers asked for while a scan runs go into the next one. Each
// caller returns only once its own marker's processes are killed.
func TestWatcherKillMarkedGathers(t *testing.T) {
	w := newWatcher(t)
	var specs []Spec
	var ps []*Process
	for range 8 {
		sp := shSpec(t, "exec sleep 60")
		specs, ps = append(specs, sp), append(ps, spawnT(t, w, sp))
	}
	other := spawnT(t, w, shSpec(t, "exec sleep 60"))
	// Once each has exec'd sleep its environ carries the marker (while
	// sh execs, it is briefly empty).
	for i, sp := range specs {
		testenv.Eventually(t, "marker readable", func() bool {
			m, err := readMarker(ps[i].Identity().PID, -1)
			return err == nil && m == sp.Marker
		})
	}
	// The first scan waits until every marker is in it or queued.
	var mu sync.Mutex
	var scans [][]string
	release := make(chan struct{})
	w.scan = func(markers ...string) (int, error) {
		mu.Lock()
		scans = append(scans, slices.Clone(markers))
		first := len(scans) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return KillMarked(markers...)
	}
	var wg sync.WaitGroup
	for i, sp := range specs {
		wg.Go(func() {
			w.KillMarked(sp.Marker)
			// Killed means signalled: the exit follows at once.
			select {
			case <-ps[i].Done():
			case <-time.After(30 * time.Second):
				t.Errorf("%s: not ended after KillMarked returned", sp.Marker)
			}
		})
	}
	testenv.Eventually(t, "every marker in the first scan or queued", func() bool {
		mu.Lock()
		defer mu.Unlock()
		w.sweepMu.Lock()
		defer w.sweepMu.Unlock()
		queued := 0
		if w.nextSweep != nil {
			queued = len(w.nextSweep.markers)
		}
		return len(scans) == 1 && len(scans[0])+queued == len(specs)
	})
	close(release)
	wg.Wait()
	var all []string
	for _, sc := range scans {
		all = append(all, sc...)
	}
	slices.Sort(all)
	var want []string
	for _, sp := range specs {
		want = append(want, sp.Marker)
	}
	slices.Sort(want)
	if len(scans) > 2 || !slices.Equal(all, want) {
		t.Fatalf("%d callers made the scans %v, want at most 2 covering each marker once", len(specs), scans)
	}
	if exited(other) {
		t.Fatal("KillMarked signalled a process without one of the markers")
	}
}

func TestParseStatOddCommandName(t *testing.T) {
	line := "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10 0"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.pgid != 42 || st.startTime != 12345 || st.state != 'S' {
		t.Fatalf("parsed %+v", st)
	}
}

// OnExit runs what is registered before the exit and what is registered
// after it, once each.
func TestOnExit(t *testing.T) {
	w := newWatcher(t)
	p := spawnT(t, w, shSpec(t, "exec sleep 60"))
	before := make(chan struct{}, 2)
	p.OnExit(func() { before <- struct{}{} })
	select {
	case <-before:
		t.Fatal("OnExit ran while the process lives")
	case <-time.After(50 * time.Millisecond):
	}
	if err := unix.Kill(p.Identity().PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	after := make(chan struct{}, 2)
	p.OnExit(func() { after <- struct{}{} })
	for _, c := range []chan struct{}{before, after} {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal("OnExit did not run after the exit")
		}
	}
	select {
	case <-before:
		t.Fatal("OnExit ran twice")
	case <-after:
		t.Fatal("OnExit ran twice")
	case <-time.After(50 * time.Millisecond):
	}
}

// Sched counts every thread's time on a CPU and waiting for one: work
// on other threads of this process shows in it, more busy threads than
// CPUs wait their turns, and a process that is gone is ErrNotFound.
func TestSched(t *testing.T) {
	before, err := Sched(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	n := 2 * goruntime.NumCPU()
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(n))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { // busy for 50 ms on a thread of its own
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread() // the thread lives on: its counts stay readable
			for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
			}
		})
	}
	wg.Wait()
	after, err := Sched(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if ran := after.Ran - before.Ran; ran < 10*time.Millisecond {
		t.Errorf("%d threads busy for 50 ms ran %v", n, ran)
	}
	if waited := after.Waited - before.Waited; waited < 10*time.Millisecond {
		t.Errorf("%d threads busy for 50 ms on %d CPUs waited %v for a CPU", n, goruntime.NumCPU(), waited)
	}
	if _, err := Sched(1 << 30); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Sched of a pid that cannot exist: %v, want ErrNotFound", err)
	}
}

// Environ right after Spawn: the spawn returns once the child's execve has
// closed its close-on-exec descriptors, a moment before the kernel sets up
// the new environment, which reads as empty until then. Environ waits that
// moment out rather than calling the process someone else's.
func TestEnvironRightAfterSpawn(t *testing.T) {
	w := newWatcher(t)
	for i := 0; i < 100; i++ {
		spec := shSpec(t, "exec sleep 60")
		p := spawnT(t, w, spec)
		env, err := p.Environ()
		if err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
		if !slices.Contains(env, MarkerEnv+"="+spec.Marker) || !slices.Contains(env, "PATH=/usr/bin:/bin") {
			t.Fatalf("spawn %d: environment %q", i, env)
		}
		if _, err := p.Stop(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
}
