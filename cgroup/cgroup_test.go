package cgroup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// manager detects this machine's cgroups under a subtree of the test's
// own, or skips saying why there are none.
func manager(t *testing.T) *Manager {
	t.Helper()
	m, info := Detect(Options{Name: fmt.Sprintf("acp-test-%d-%x", os.Getpid(), rand.Uint32())})
	if m == nil {
		t.Skipf("no cgroup containment on this machine: %s", info.Note)
	}
	t.Cleanup(func() { m.Close(); m.Prune() })
	t.Logf("cgroups: %+v", info)
	return m
}

// spawn starts sh -c script in g, watched by a proc.Watcher.
func spawn(t *testing.T, g *Group, script string) *proc.Process {
	t.Helper()
	w, err := proc.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	dir := t.TempDir()
	p, err := w.Spawn(proc.Spec{
		Argv: []string{"sh", "-c", script}, Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir,
		Stdout: filepath.Join(dir, "out"), Stderr: filepath.Join(dir, "err"),
		Marker: fmt.Sprintf("m-%x", rand.Uint64()), Cgroup: g,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitClosed(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30 s", what)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	if unix.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// pidsIn reads the pids a script wrote, one per line, to file.
func pidsIn(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	eventually(t, "helpers write their pids", func() bool {
		b, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

func TestChildIsBornInItsGroupAndNothingEscapesKill(t *testing.T) {
	m := manager(t)
	g, err := m.Create("sb1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	// A helper in a session of its own, and a double-forked grandchild.
	p := spawn(t, g, fmt.Sprintf(`setsid sleep 1000 & echo $! >> %[1]s; (sh -c 'sleep 1000 & echo $! >> %[1]s') ; exec sleep 1000`, pidFile))
	id := p.Identity()
	if id.Cgroup != g.Path() {
		t.Fatalf("identity cgroup %q, want %q", id.Cgroup, g.Path())
	}
	cg, err := proc.ReadCgroups(id.PID)
	if err != nil {
		t.Fatal(err)
	}
	if cg[""] != g.Path() {
		t.Fatalf("child in cgroup2 %q, want %q", cg[""], g.Path())
	}
	for c, path := range g.Ref().V1 {
		if cg[c] != path {
			t.Errorf("child in v1 %s cgroup %q, want %q (born outside its limits)", c, cg[c], path)
		}
	}
	// The thread that forked ends (a moment after the fork): no thread of
	// this process stays in the sandbox's cgroups.
	eventually(t, "no thread of ours in the sandbox's cgroups", func() bool {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
			if err != nil {
				continue
			}
			for _, path := range proc.ParseCgroups(b) {
				if strings.HasSuffix(path, "/sb1") {
					return false
				}
			}
		}
		return true
	})
	helpers := pidsIn(t, pidFile, 2)
	empty, err := g.Empty()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-empty:
		t.Fatal("empty while processes run")
	default:
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "group empties after kill", empty)
	waitClosed(t, "leader's exit seen", p.Done())
	for _, pid := range helpers {
		if alive(pid) {
			t.Errorf("helper %d survived the group kill", pid)
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.dir(g.Path())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("group directory still there: %v", err)
	}
}

func TestKillEachWithoutCgroupKill(t *testing.T) {
	m := manager(t)
	m.canKill = false // the path of kernels before 5.14
	g, err := m.Create("sb2", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := spawn(t, g, fmt.Sprintf(`setsid sleep 1000 & echo $! >> %s; exec sleep 1000`, pidFile))
	helpers := pidsIn(t, pidFile, 1)
	empty, err := g.Empty()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "group empties", empty)
	waitClosed(t, "leader exits", p.Done())
	if alive(helpers[0]) {
		t.Fatal("helper survived")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestDrain: the members End pins are drained: the callback comes once
// every one has exited (each pidfd, not the first), and a group past the
// bound pins nothing (inotify alone then reports its end).
func TestDrain(t *testing.T) {
	m := manager(t)
	g, err := m.Create("sb4", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := spawn(t, g, fmt.Sprintf(`setsid sleep 1000 & echo $! >> %[1]s; sleep 1000 & echo $! >> %[1]s; exec sleep 1000`, pidFile))
	helpers := pidsIn(t, pidFile, 2)
	members := g.pin()
	if len(members) != 3 {
		t.Fatalf("pinned %d members, want 3 (the leader and two helpers)", len(members))
	}
	drained := make(chan []string)
	drain(members, func() {
		var left []string
		for _, pid := range append(helpers, p.Identity().PID) {
			if alive(pid) {
				left = append(left, fmt.Sprintf("%d alive", pid))
			}
		}
		drained <- left
	})
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case left := <-drained:
		if len(left) > 0 {
			t.Fatalf("drained before every member exited: %v", left)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not call back within 30 s of the kill")
	}
	removeWhenEmpty(t, g)

	many, err := m.Create("sb5", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	spawn(t, many, fmt.Sprintf(`for i in $(seq %d); do sleep 1000 & done; exec sleep 1000`, maxDrained))
	eventually(t, "the group fills past the bound", func() bool {
		b, _ := os.ReadFile(filepath.Join(m.dir(many.Path()), "cgroup.procs"))
		return len(strings.Fields(string(b))) > maxDrained
	})
	fds := func() int { d, _ := os.ReadDir("/proc/self/fd"); return len(d) }
	before := fds()
	if pinned := many.pin(); pinned != nil {
		t.Errorf("pinned %d members of a group past the bound", len(pinned))
	}
	if after := fds(); after != before {
		t.Errorf("pinning a group past the bound holds descriptors: %d before, %d after", before, after)
	}
	empty, err := many.End()
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "a group past the bound ends, through inotify", empty)
	if err := many.Remove(); err != nil {
		t.Fatal(err)
	}
}

// removeWhenEmpty waits until Empty reports g empty, then removes it, so
// that the test's subtree goes with its manager.
func removeWhenEmpty(t *testing.T, g *Group) {
	t.Helper()
	empty, err := g.Empty()
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "the group reports empty", empty)
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestEmptyOfAGroupThatIsAlreadyEmpty(t *testing.T) {
	m := manager(t)
	g, err := m.Create("sb3", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	removeWhenEmpty(t, g)
}

func TestLimitsAndUsage(t *testing.T) {
	m := manager(t)
	for _, l := range []string{LimitCPU, LimitMemory, LimitPids} {
		if !m.Info().Supports(l) {
			t.Skipf("the %s limit is not enforceable here: %s", l, m.Info().Note)
		}
	}
	g, err := m.Create("sb4", Limits{MilliCPU: 500, MemoryBytes: 64 << 20, Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	p := spawn(t, g, `while :; do :; done`)
	var u Usage
	eventually(t, "cpu usage moves", func() bool {
		u, err = g.Usage()
		return err == nil && u.CPUSeconds > 0.05
	})
	if u.Pids < 1 || u.MemoryBytes <= 0 {
		t.Errorf("usage %+v: want pids and memory", u)
	}
	if err := g.Set(Limits{MilliCPU: 1000, MemoryBytes: 32 << 20, Pids: 10}); err != nil {
		t.Fatalf("resize a running group: %v", err)
	}
	pidsMax := "pids.max"
	dir := m.dir(g.Path())
	if p, ok := g.Ref().V1[LimitPids]; ok {
		dir = m.v1[LimitPids].dir(p)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pidsMax)); strings.TrimSpace(string(b)) != "10" {
		t.Errorf("pids.max %q after resize, want 10", b)
	}
	empty, _ := g.Empty()
	g.Kill()
	waitClosed(t, "killed", empty)
	waitClosed(t, "leader", p.Done())
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// A group made without limits has no v1 group (a spawn into one costs a
// thread's move), yet reports memory; a limit set while it runs, its
// processes forking all along, makes the v1 groups and moves every one of
// them in; Open finds those groups by name even when the ref it is given
// predates them.
func TestLimitsSetLaterMoveEveryProcess(t *testing.T) {
	m := manager(t)
	if len(m.v1) == 0 {
		t.Skip("no cgroup v1 hierarchies here: nothing to join later (pure cgroup2 sets limits in place)")
	}
	for _, l := range []string{LimitMemory, LimitPids} {
		if !m.Info().Supports(l) {
			t.Skipf("the %s limit is not enforceable here: %s", l, m.Info().Note)
		}
	}
	g, err := m.Create("sb-later", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if g.NeedsThread() || len(g.Ref().V1) != 0 {
		t.Fatalf("a group without limits has v1 groups: %+v", g.Ref())
	}
	ref := g.Ref()
	p := spawn(t, g, `sleep 1000 & sleep 1000 & while :; do sleep 0.01 & wait $!; done`)
	procs := func(dir string) []string {
		l, _ := readLines(filepath.Join(dir, "cgroup.procs"))
		return l
	}
	eventually(t, "three processes", func() bool { return len(procs(m.dir(g.Path()))) >= 3 })
	var u Usage
	eventually(t, "memory without a memory group", func() bool {
		u, err = g.Usage()
		return err == nil && u.MemoryBytes > 0
	})
	if err := g.Set(Limits{MemoryBytes: 64 << 20, Pids: 64}); err != nil {
		t.Fatalf("limit a running group: %v", err)
	}
	for _, c := range []string{LimitMemory, LimitPids} {
		v1 := g.Ref().V1[c]
		if v1 == "" {
			t.Fatalf("no v1 %s group after the limit: %+v", c, g.Ref())
		}
		dir := m.v1[c].dir(v1)
		for _, pid := range procs(m.dir(g.Path())) {
			if !slices.Contains(procs(dir), pid) {
				// A child forked after the move is born in its parent's
				// groups: only one that exited in between may be missing.
				if n, _ := strconv.Atoi(pid); alive(n) {
					t.Errorf("process %s is not in the v1 %s group", pid, c)
				}
			}
		}
	}
	if l, err := g.Limits(); err != nil || l.MemoryBytes != 64<<20 || l.Pids != 64 {
		t.Errorf("limits after the join: %+v %v", l, err)
	}
	// One memory figure, limit or none: the new v1 group, charged only
	// what was faulted in since the move, is not what is read.
	if after, err := g.Usage(); err != nil || after.MemoryBytes < u.MemoryBytes/2 {
		t.Errorf("memory after the limit: %d bytes (%v), before it %d", after.MemoryBytes, err, u.MemoryBytes)
	}
	again, err := m.Open(ref, "sb-later")
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Ref().V1) != 2 {
		t.Errorf("Open with the old ref: %+v, want both v1 groups found by name", again.Ref())
	}
	empty, _ := g.Empty()
	g.Kill()
	waitClosed(t, "killed", empty)
	waitClosed(t, "leader", p.Done())
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesForeignPaths(t *testing.T) {
	m := manager(t)
	for _, ref := range []Ref{{Path: "/"}, {Path: "/x/../sb5"}, {Path: "sb5"}, {Path: "/other"}} {
		if _, err := m.Open(ref, "sb5"); err == nil {
			t.Errorf("Open(%q) accepted", ref.Path)
		}
	}
	if _, err := m.Open(Ref{Path: m.base + "/sb5"}, "sb5"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing group: %v, want not exist", err)
	}
}

func TestUnsupportedLimitsAreNamed(t *testing.T) {
	var m *Manager
	err := m.Supports(Limits{MemoryBytes: 1 << 30, Pids: 5})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "memory, pids") {
		t.Fatalf("Supports on no cgroups: %v", err)
	}
	if err := m.Supports(Limits{}); err != nil {
		t.Fatalf("no limits asked: %v", err)
	}
}

func TestParseMounts(t *testing.T) {
	in := `35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
36 25 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
37 25 0:32 /sub /sys/fs/cgroup/memory\040x rw - cgroup cgroup rw,memory
38 25 8:1 / / rw - ext4 /dev/sda1 rw`
	got := parseMounts([]byte(in))
	if len(got) != 3 {
		t.Fatalf("got %d mounts, want 3: %+v", len(got), got)
	}
	if got[2].point != "/sys/fs/cgroup/memory x" || got[2].root != "/sub" || got[2].options[1] != "memory" {
		t.Fatalf("mount %+v", got[2])
	}
	if d := hierDir(got[2].point, got[2].root, "/sub/a/b"); d != "/sys/fs/cgroup/memory x/a/b" {
		t.Fatalf("hierDir = %q", d)
	}
}

// The quota written for a cpu limit is the one that reads back as it
// (300 thousandths of a CPU is 30000 µs), and a quota another hand wrote
// finer than a thousandth reads back as the nearest.
func TestCPUQuotaRoundTrips(t *testing.T) {
	for _, milli := range []int64{10, 123, 300, 700, 1000, 1500, 2333, 1 << 20} {
		q := cpuQuota(milli)
		if back := MilliCPUFromQuota(q, period); back != milli {
			t.Errorf("cpu %dm: quota %d reads back as %dm", milli, q, back)
		}
	}
	if cpuQuota(300) != 30000 || cpuQuota(0) != -1 || cpuQuota(1) != 1000 {
		t.Errorf("quota of 300m: %d, of 1m: %d, of none: %d", cpuQuota(300), cpuQuota(1), cpuQuota(0))
	}
	if MilliCPUFromQuota(30049, period) != 300 || MilliCPUFromQuota(30050, period) != 301 || MilliCPUFromQuota(50000, 1000000) != 50 {
		t.Error("a quota finer than a thousandth does not read back as the nearest")
	}
}
