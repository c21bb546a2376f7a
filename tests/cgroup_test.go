// This file is long because its tests share the machine's cgroup checks
// and helpers declared here.

package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// cgroupScript is the native command of the containment tests: the stub
// agent ("$STUB", replaced by its path), preceded by whatever the request's MODE asks for. Helpers write
// their pids to $AGENT_WORKSPACE_DIR/pids; "go" in the workspace starts
// the fork bomb and the memory hog.
const cgroupScript = `
cd "$AGENT_WORKSPACE_DIR"
waitgo() { while [ ! -e go ]; do sleep 0.05; done; }
case "$MODE" in
escape)
	setsid sleep 100000 & echo $! >> pids
	(sh -c 'sleep 100000 & echo $! >> pids') ;;
exit-helper)
	setsid sleep 100000 & echo $! >> pids
	exit 3 ;;
burn)
	(while :; do :; done) & ;;
forkbomb)
	(waitgo; b() { b & b; }; b) 2>/dev/null &
	"$STUB" stub-agent &
	exec sleep 100000 ;;
hog)
	"$STUB" stub-agent &
	waitgo
	head -c 1073741824 /dev/zero | tail
	exit $? ;;
esac
exec "$STUB" stub-agent
`

// cgroupDaemon starts a daemon whose children run cgroupScript, or skips
// when this machine gives sandboxes no cgroup.
func cgroupDaemon(t *testing.T) (*testenv.Daemon, wire.Cgroups) {
	t.Helper()
	// A child's environment is built, not inherited: the stub's path goes
	// into the script.
	script := strings.ReplaceAll(cgroupScript, `"$STUB"`, strconv.Quote(testenv.Binary(t)))
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	// Without isolation: the script reports its helpers' pids for the
	// test to find on the host, and runs the stub by its path here. The
	// isolated runtime's containment is the conformance suite's
	// (supervisor/runtime/native) and TestIsolated*.
	d := startDaemon(t, "AGENT_CONTROL_PLANE_NATIVE_COMMAND="+string(argv), "AGENT_CONTROL_PLANE_ISOLATION=off")
	return d, containment(t, d)
}

// containment is d's cgroup containment, or a skip where it has none.
func containment(t *testing.T, d *testenv.Daemon) wire.Cgroups {
	t.Helper()
	code, b := call(t, d, "GET", "/v1/info", "")
	var info wire.Info
	if code != 200 || json.Unmarshal(b, &info) != nil || info.Cgroups == nil {
		t.Fatalf("info: %d %s", code, b)
	}
	if m := info.Cgroups.Mode; m != "v2" && m != "hybrid" {
		t.Skipf("no cgroup containment here (cgroups %s: %s)", m, info.Cgroups.Note)
	}
	return *info.Cgroups
}

func create(t *testing.T, d *testenv.Daemon, body string) {
	t.Helper()
	if code, b := call(t, d, "POST", "/v1/sandboxes", body); code != 201 {
		t.Fatalf("create %s: %d %s", body, code, b)
	}
}

// cgroup2Dir is where a cgroup2 path lives on disk.
func cgroup2Dir(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 2 && fs[2] == "cgroup2" {
			return filepath.Join(fs[1], path)
		}
	}
	t.Fatal("no cgroup2 mount")
	return ""
}

// sandboxCgroup is the cgroup2 directory a sandbox's record names.
func sandboxCgroup(t *testing.T, d *testenv.Daemon, id string) (path, dir string) {
	t.Helper()
	r := record(t, d, id)
	if r.Handle == nil {
		t.Fatalf("%s: no handle", id)
	}
	path, err := native.CgroupPath(*r.Handle)
	if err != nil || path == "" {
		t.Fatalf("%s: record names no cgroup (%v)", id, err)
	}
	return path, cgroup2Dir(t, path)
}

// helperPIDs reads the pids the sandbox's helpers wrote.
func helperPIDs(t *testing.T, d *testenv.Daemon, id string, n int) []int {
	t.Helper()
	file := filepath.Join(d.Root, id, "workspace", "pids")
	var pids []int
	testenv.Eventually(t, fmt.Sprintf("%s: %d helper pids", id, n), func() bool {
		b, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && p > 0 {
				pids = append(pids, p)
			}
		}
		return len(pids) >= n
	})
	return pids
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Helpers that leave the child's process group (setsid, a double fork) are
// in its cgroup, are still there after a daemon restart, and die with the
// stop; the cgroup is removed.
func TestCgroupNothingEscapesStop(t *testing.T) {
	d, _ := cgroupDaemon(t)
	create(t, d, `{"name":"esc","envVars":{"MODE":"escape"}}`)
	waitState(t, d, "esc", "started")
	path, dir := sandboxCgroup(t, d, "esc")
	helpers := helperPIDs(t, d, "esc", 2)
	for _, pid := range helpers {
		cg, err := proc.ReadCgroups(pid)
		if err != nil || cg[""] != path {
			t.Fatalf("helper %d in cgroup %q, want %q (%v)", pid, cg[""], path, err)
		}
	}

	// Restart: the sandbox is re-adopted with its cgroup.
	d.Kill()
	d.Start()
	if got := waitState(t, d, "esc", "started"); got.State != "started" {
		t.Fatalf("after restart: %+v", got)
	}

	if code, b := call(t, d, "POST", "/v1/sandboxes/esc/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	for _, pid := range helpers {
		if !gone(pid) {
			t.Errorf("helper %d outlived the stop", pid)
		}
	}
	testenv.Eventually(t, "cgroup removed", func() bool { return !exists(dir) })
}

// A child that exits after starting a helper outside its group takes the
// helper with it.
func TestCgroupHelperOfAnExitedChildIsKilled(t *testing.T) {
	d, _ := cgroupDaemon(t)
	create(t, d, `{"name":"quit","envVars":{"MODE":"exit-helper"}}`)
	info := waitState(t, d, "quit", "stopped")
	if !strings.Contains(info.ErrorReason, "exit code 3") {
		t.Errorf("errorReason %q, want the leader's exit code 3", info.ErrorReason)
	}
	_, dir := sandboxCgroup(t, d, "quit")
	for _, pid := range helperPIDs(t, d, "quit", 1) {
		if !gone(pid) {
			t.Errorf("helper %d outlived its sandbox", pid)
		}
	}
	testenv.Eventually(t, "cgroup removed", func() bool { return !exists(dir) })
	if code, _ := call(t, d, "DELETE", "/v1/sandboxes/quit", ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
}

// A leader that dies while the daemon is away leaves helpers in its
// cgroup; the restarted daemon kills them and removes the cgroup.
func TestCgroupLeftoversOfALeaderThatDiedWhileAway(t *testing.T) {
	d, _ := cgroupDaemon(t)
	create(t, d, `{"name":"orphan","envVars":{"MODE":"escape"}}`)
	waitState(t, d, "orphan", "started")
	_, dir := sandboxCgroup(t, d, "orphan")
	helpers := helperPIDs(t, d, "orphan", 2)
	leader := childPID(t, d, "orphan")
	d.Kill()
	if err := killPID(leader); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "leader gone", func() bool { return gone(leader) })
	d.Start()
	info := waitState(t, d, "orphan", "stopped")
	if info.ErrorReason != "exited; status unknown" {
		t.Errorf("errorReason %q", info.ErrorReason)
	}
	if pid := childPID(t, d, "orphan"); pid != leader {
		t.Errorf("the stopped record names pid %d, want the leader %d", pid, leader)
	}
	for _, pid := range helpers {
		testenv.Eventually(t, fmt.Sprintf("helper %d killed", pid), func() bool { return gone(pid) })
	}
	testenv.Eventually(t, "cgroup removed", func() bool { return !exists(dir) })
}

// Usage moves when the child burns CPU, in the answer and in /metrics; a
// resize changes the limits of the running sandbox.
func TestCgroupUsageAndResize(t *testing.T) {
	d, cg := cgroupDaemon(t)
	create(t, d, `{"name":"burn","cpu":0.5,"envVars":{"MODE":"burn"}}`)
	waitState(t, d, "burn", "started")
	var info sandboxInfo
	testenv.Eventually(t, "cpu usage moves", func() bool {
		info = get(t, d, "burn")
		return info.Usage != nil && info.Usage.CPUSeconds > 0.2
	})
	if info.CPU != 0.5 || info.Usage.Pids < 2 {
		t.Errorf("limits and usage: %+v %+v", info, *info.Usage)
	}
	// Lists carry usage only when asked.
	for q, want := range map[string]bool{"": false, "?usage=true": true} {
		code, b := call(t, d, "GET", "/v1/sandboxes"+q, "")
		var l struct{ Sandboxes []sandboxInfo }
		if code != 200 || json.Unmarshal(b, &l) != nil || len(l.Sandboxes) != 1 {
			t.Fatalf("list%s: %d %s", q, code, b)
		}
		if got := l.Sandboxes[0].Usage != nil; got != want {
			t.Errorf("list%s: usage given %v, want %v", q, got, want)
		}
	}
	testenv.Eventually(t, "usage in /metrics", func() bool {
		_, b := call(t, d, "GET", "/metrics", "")
		v, ok := metricValue(string(b), `agent_control_plane_sandbox_cpu_seconds{runtime="native"}`)
		return ok && v > 0.2
	})
	if len(cg.Limits) < 3 {
		t.Skipf("resize of every limit needs cpu, memory and pids; this machine has %v", cg.Limits)
	}
	code, b := call(t, d, "POST", "/v1/sandboxes/burn/resize", `{"cpu":0.25,"memory":0.5,"pids":100}`)
	if code != 200 {
		t.Fatalf("resize: %d %s", code, b)
	}
	info = get(t, d, "burn")
	if info.CPU != 0.25 || info.Memory != 0.5 || info.Pids != 100 {
		t.Errorf("after resize: %+v", info)
	}
	if r := record(t, d, "burn"); r.Resources.Pids != 100 || r.Resources.MemoryBytes != 512<<20 {
		t.Errorf("record after resize: %+v", r.Resources)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes/burn/resize", `{"memory":0.001}`); code != 400 {
		t.Errorf("resize below 16 MiB: %d %s", code, b)
	}
	// A sandbox created without limits (on a hybrid machine: in no v1
	// group, so its spawn moved no thread) is given every limit later: its
	// v1 groups are made and its processes moved into them.
	create(t, d, `{"name":"nolimits"}`)
	waitState(t, d, "nolimits", "started")
	code, b = call(t, d, "POST", "/v1/sandboxes/nolimits/resize", `{"cpu":1,"memory":0.25,"pids":50}`)
	if code != 200 {
		t.Fatalf("limits added by resize: %d %s", code, b)
	}
	if info := get(t, d, "nolimits"); info.CPU != 1 || info.Memory != 0.25 || info.Pids != 50 {
		t.Errorf("limits added by resize: %+v", info)
	}
	cgs, err := proc.ReadCgroups(childPID(t, d, "nolimits"))
	if err != nil {
		t.Fatal(err)
	}
	if cg.Mode == "hybrid" {
		group := path.Base(cgs[""])
		for _, c := range []string{"cpu", "memory", "pids"} {
			if path.Base(cgs[c]) != group {
				t.Errorf("after the resize the child is in %s %q, not its group %q", c, cgs[c], group)
			}
		}
	}
}

// A pids limit caps a fork bomb while the daemon goes on answering, and a
// stop ends it.
func TestCgroupPidsLimitCapsAForkBomb(t *testing.T) {
	d, cg := cgroupDaemon(t)
	if !strings.Contains(strings.Join(cg.Limits, ","), "pids") {
		t.Skipf("no pids limit on this machine: %s", cg.Note)
	}
	create(t, d, `{"name":"bomb","pids":64,"cpu":0.5,"envVars":{"MODE":"forkbomb"}}`)
	waitState(t, d, "bomb", "started")
	if err := os.WriteFile(filepath.Join(d.Root, "bomb", "workspace", "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var peak int64
	testenv.Eventually(t, "the bomb fills its limit", func() bool {
		info := get(t, d, "bomb")
		if info.Usage == nil {
			return false
		}
		peak = max(peak, info.Usage.Pids)
		return info.Usage.Pids >= 60
	})
	// The daemon answers, and creates other sandboxes, meanwhile.
	for range 5 {
		if code, _ := call(t, d, "GET", "/v1/info", ""); code != 200 {
			t.Fatalf("info during the bomb: %d", code)
		}
		if u := get(t, d, "bomb").Usage; u != nil {
			peak = max(peak, u.Pids)
		}
	}
	create(t, d, `{"name":"calm"}`)
	waitState(t, d, "calm", "started")
	if peak > 64 {
		t.Errorf("%d tasks in a sandbox limited to 64", peak)
	}
	_, dir := sandboxCgroup(t, d, "bomb")
	if code, b := call(t, d, "POST", "/v1/sandboxes/bomb/stop?force=true", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	testenv.Eventually(t, "cgroup removed", func() bool { return !exists(dir) })
}

// A memory hog ends as an OOM kill, and says so.
func TestCgroupMemoryLimitEndsAHogAsOOM(t *testing.T) {
	d, cg := cgroupDaemon(t)
	if !strings.Contains(strings.Join(cg.Limits, ","), "memory") {
		t.Skipf("no memory limit on this machine: %s", cg.Note)
	}
	create(t, d, `{"name":"hog","memory":0.0625,"envVars":{"MODE":"hog"}}`)
	waitState(t, d, "hog", "started")
	if err := os.WriteFile(filepath.Join(d.Root, "hog", "workspace", "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	info := waitState(t, d, "hog", "stopped")
	if !strings.Contains(info.ErrorReason, "out of memory") {
		t.Fatalf("errorReason %q, want an OOM kill", info.ErrorReason)
	}
}

// A limit the machine cannot enforce is refused, naming it; nothing is
// left behind.
func TestCgroupsOffRefusesLimits(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_CGROUPS=off")
	code, b := call(t, d, "GET", "/v1/info", "")
	var info wire.Info
	if code != 200 || json.Unmarshal(b, &info) != nil || info.Cgroups == nil || info.Cgroups.Mode != "off" {
		t.Fatalf("info: %d %s", code, b)
	}
	code, b = call(t, d, "POST", "/v1/sandboxes", `{"name":"lim","memory":1}`)
	if code != 400 || !strings.Contains(string(b), "limits_unsupported") || !strings.Contains(string(b), "memory") {
		t.Fatalf("create with a limit, cgroups off: %d %s", code, b)
	}
	if exists(filepath.Join(d.Root, "lim")) {
		t.Fatal("a refused create left its directory")
	}
	// Without limits it runs as before.
	create(t, d, `{"name":"plain"}`)
	waitState(t, d, "plain", "started")
	if r := record(t, d, "plain"); r.Handle == nil {
		t.Fatal("no handle")
	} else if p, _ := native.CgroupPath(*r.Handle); p != "" {
		t.Fatalf("cgroups off, yet the record names cgroup %q", p)
	}
}

func killPID(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// metricValue finds one sample in a Prometheus text exposition.
func metricValue(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// At start, an empty cgroup of a sandbox whose record says it ended (a
// daemon killed before its Delete) is removed; a live sandbox's is kept;
// and one that no record names is logged and left: anyone who may write
// in the subtree could have made it.
func TestCgroupPrunesOnlyGroupsItProves(t *testing.T) {
	d, cg := cgroupDaemon(t)
	create(t, d, `{"name":"kept"}`)
	create(t, d, `{"name":"ended"}`)
	waitState(t, d, "kept", "started")
	waitState(t, d, "ended", "started")
	_, keptDir := sandboxCgroup(t, d, "kept")
	if code, b := call(t, d, "POST", "/v1/sandboxes/ended/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	base := cgroup2Dir(t, cg.Path)
	leftover := filepath.Join(base, record(t, d, "ended").Marker)
	stray := filepath.Join(base, "stray.0123456789abcdef01234567")
	d.Kill()
	for _, dir := range []string{leftover, stray} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(stray) })
	d.Start()
	waitState(t, d, "kept", "started")
	if exists(leftover) {
		t.Error("the cgroup of a sandbox whose record says it ended is still there")
	}
	if !exists(stray) {
		t.Error("a cgroup no record names was removed")
	}
	if !strings.Contains(d.Log(), "leaving alone a cgroup no record of this root names") {
		t.Errorf("the stray was not logged:\n%s", d.Log())
	}
	if !exists(keptDir) {
		t.Error("the live sandbox's cgroup was removed")
	}
}

// The CLI gives and changes limits, and shows them with the usage and the
// machine's containment.
//
// The daemon's default agent and mode: isolated where the machine allows.
func TestCgroupCLILimits(t *testing.T) {
	d := startDaemon(t)
	cg := containment(t, d)
	if len(cg.Limits) < 3 {
		t.Skipf("needs cpu, memory and pids limits; this machine has %v", cg.Limits)
	}
	if code, out, errOut := cli(t, d, "create", "--cpu", "0.5", "--pids", "64", "--wait", "lim"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	_, out, _ := cli(t, d, "get", "lim")
	if !strings.Contains(out, "0.5 CPU, 64 tasks") || !strings.Contains(out, "CPU seconds") {
		t.Errorf("get shows no limits or usage:\n%s", out)
	}
	if code, out, errOut := cli(t, d, "resize", "--memory", "0.5", "lim"); code != 0 || !strings.Contains(out, "512 MiB memory") {
		t.Errorf("resize: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli(t, d, "resize", "lim"); code != 2 || !strings.Contains(errOut, "--cpu") {
		t.Errorf("resize without a limit: %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, d, "resize", "--cpu", "-1", "lim"); code != 2 {
		t.Errorf("resize --cpu -1: %d %s", code, errOut)
	}
	if _, out, _ := cli(t, d, "info"); !strings.Contains(out, "Cgroups:") || !strings.Contains(out, cg.Mode) {
		t.Errorf("info shows no cgroups:\n%s", out)
	}
}

// A resize that reached the kernel but not the record (the daemon killed
// between the two) is not reported wrongly: on adopt the record takes
// the limits in force.
func TestCgroupLimitsReconciledOnAdopt(t *testing.T) {
	d, cg := cgroupDaemon(t)
	if !strings.Contains(strings.Join(cg.Limits, ","), "pids") {
		t.Skipf("needs a pids limit; this machine has %v", cg.Limits)
	}
	create(t, d, `{"name":"drift","pids":100}`)
	waitState(t, d, "drift", "started")
	pid := childPID(t, d, "drift")
	d.Kill()
	file := controllerFile(t, pid, "pids", "pids.max")
	if err := os.WriteFile(file, []byte("77"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Start()
	waitState(t, d, "drift", "started")
	if info := get(t, d, "drift"); info.Pids != 77 {
		t.Errorf("after adopt the daemon reports pids %d; the kernel enforces 77", info.Pids)
	}
	if r := record(t, d, "drift"); r.Resources.Pids != 77 {
		t.Errorf("the record says pids %d; the kernel enforces 77", r.Resources.Pids)
	}
}

// controllerFile is a file of the cgroup that controller manages for pid:
// its v1 hierarchy's where it has one, else cgroup2's.
func controllerFile(t *testing.T, pid int, controller, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), controller) {
			return filepath.Join("/sys/fs/cgroup", controller, parts[2], name)
		}
		if parts[0] == "0" {
			v2 = parts[2]
		}
	}
	return filepath.Join(cgroup2Dir(t, v2), name)
}
