package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// chaosRounds is how many kill-and-restart rounds the churn test runs:
// $ACP_CHAOS_ROUNDS, 6 by default (make chaos sets 50).
func chaosRounds() int {
	if n, err := strconv.Atoi(os.Getenv("ACP_CHAOS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 6
}

type liveSandbox struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	Port        int    `json:"port"`
	ErrorReason string `json:"errorReason"`
}

func list(t *testing.T, d *testenv.Daemon) []liveSandbox {
	t.Helper()
	code, b := call(t, d, "GET", "/v1/sandboxes", "")
	var out struct{ Sandboxes []liveSandbox }
	if code != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("list: %d %s", code, b)
	}
	return out.Sandboxes
}

// markedUnder returns the processes whose working directory lies under
// root and that carry a sandbox marker: every child the daemon started
// there, by marker.
func markedUnder(root string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || !strings.HasPrefix(cwd, root+"/") {
			continue
		}
		if gone(pid) {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		for _, kv := range strings.Split(string(env), "\x00") {
			if m, ok := strings.CutPrefix(kv, "AGENT_CONTROL_PLANE_MARKER="); ok {
				out[pid] = m
			}
		}
	}
	return out
}

// checkInvariants asserts what must hold after any restart: no corrupt
// record, no port leased twice, no live child untracked, no dead child
// claiming to be started.
func checkInvariants(t *testing.T, d *testenv.Daemon, round int) {
	t.Helper()
	if bad, _ := filepath.Glob(filepath.Join(d.Root, "*", "sandbox.json.corrupt-*")); len(bad) > 0 {
		t.Fatalf("round %d: corrupt records %v\n%s", round, bad, d.Log())
	}
	sbs := list(t, d)
	ports := map[int]string{}
	markers := map[string]string{} // marker → id of a live sandbox
	for _, sb := range sbs {
		if sb.State != "starting" && sb.State != "started" {
			continue
		}
		if other, dup := ports[sb.Port]; dup {
			t.Fatalf("round %d: %s and %s share port %d", round, sb.ID, other, sb.Port)
		}
		ports[sb.Port] = sb.ID
		b, err := os.ReadFile(filepath.Join(d.Root, sb.ID, supervisor.RecordFile))
		if err != nil {
			t.Fatalf("round %d: live sandbox %s has no record: %v", round, sb.ID, err)
		}
		rec, err := supervisor.DecodeRecord(b)
		if err != nil {
			t.Fatalf("round %d: %s: %v", round, sb.ID, err)
		}
		markers[rec.Marker] = sb.ID
		if sb.State == "started" {
			// A started sandbox's child is alive and serves its own id.
			c := d.HTTP(5 * time.Second)
			resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/api/info", sb.Port))
			if err != nil {
				// It may have died this instant; then the daemon must say so.
				testenv.Eventually(t, sb.ID+" reported stopped", func() bool { return get(t, d, sb.ID).State == "stopped" })
				continue
			}
			var info struct{ SandboxID string }
			json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if info.SandboxID != sb.ID {
				t.Fatalf("round %d: port %d of %s is served by %q", round, sb.Port, sb.ID, info.SandboxID)
			}
		}
	}
	// Every marked process under the root belongs to a live sandbox.
	// Processes being killed by the restart's sweep may take a moment.
	testenv.Eventually(t, fmt.Sprintf("round %d: no untracked children", round), func() bool {
		for pid, m := range markedUnder(d.Root) {
			if _, ok := markers[m]; !ok {
				t.Logf("round %d: pid %d (marker %s) not tracked yet", round, pid, m)
				return false
			}
		}
		return true
	})
}

// The daemon is SIGKILLed at random points while creates, stops and
// deletes run; after every restart the invariants hold.
func TestChaosKillDuringChurn(t *testing.T) {
	lo, _ := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: lo + 39, Env: []string{"AGENT_CONTROL_PLANE_STOP_GRACE_MS=200"}})
	c := d.HTTP(10 * time.Second)
	seen := map[string]int{}
	for round := range chaosRounds() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					id := fmt.Sprintf("r%dw%di%d", round, w, i%6)
					var req *http.Request
					switch rand.IntN(3) {
					case 0:
						req, _ = http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/sandboxes", strings.NewReader(`{"name":"`+id+`"}`))
						req.Header.Set("Content-Type", "application/json")
					case 1:
						req, _ = http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/sandboxes/"+id+"/stop", nil)
					default:
						req, _ = http.NewRequestWithContext(ctx, "DELETE", d.URL+"/v1/sandboxes/"+id, nil)
					}
					if resp, err := c.Do(req); err == nil {
						resp.Body.Close()
					} else {
						return // the daemon is gone
					}
				}
			})
		}
		time.Sleep(time.Duration(20+rand.IntN(250)) * time.Millisecond)
		d.Kill()
		cancel()
		wg.Wait()
		d.Start()
		checkInvariants(t, d, round)
		_, m := call(t, d, "GET", "/metrics", "")
		for _, line := range strings.Split(string(m), "\n") {
			if rest, ok := strings.CutPrefix(line, `agent_control_plane_rehydrations_total{result="`); ok {
				res, v, _ := strings.Cut(rest, `"} `)
				n, _ := strconv.Atoi(v)
				seen[res] += n
			}
		}
	}
	t.Logf("rehydration results over %d restarts: %v", chaosRounds(), seen)
	if seen["adopted"] == 0 {
		t.Fatal("no restart found a live sandbox to re-adopt: the churn did not run")
	}
}

// A record whose PID now belongs to an unrelated process: after a restart
// that process is never signalled, and the sandbox is stopped.
func TestChaosPIDReuse(t *testing.T) {
	d := startDaemon(t)
	call(t, d, "POST", "/v1/sandboxes", `{"name":"reused"}`)
	waitState(t, d, "reused", "started")
	d.Kill()
	child := childPID(t, d, "reused")
	syscall.Kill(child, syscall.SIGKILL)
	testenv.Eventually(t, "child gone", func() bool { return gone(child) })
	foreign := testenv.ForeignProcess(t)
	// Point the record at the foreign process, as PID reuse would.
	rec := record(t, d, "reused")
	var id map[string]any
	if err := json.Unmarshal(rec.Handle.Data, &id); err != nil || id["pid"] == nil {
		t.Fatalf("native handle data %s: %v", rec.Handle.Data, err)
	}
	id["pid"], id["pgid"] = foreign, foreign
	rec.Handle.Data, _ = json.Marshal(id)
	b, _ := json.Marshal(rec)
	os.WriteFile(filepath.Join(d.Root, "reused", supervisor.RecordFile), b, 0o644)

	d.Start()
	info := get(t, d, "reused")
	if info.State != "stopped" || !strings.Contains(info.ErrorReason, "not signalled") {
		t.Fatalf("after restart: %+v", info)
	}
	call(t, d, "POST", "/v1/sandboxes/reused/stop?force=true", "")
	call(t, d, "DELETE", "/v1/sandboxes/reused", "")
	if err := syscall.Kill(foreign, 0); err != nil || gone(foreign) {
		t.Fatalf("foreign process was signalled: %v", err)
	}
}

// mountTmpfs mounts a small tmpfs at dir for the test, or skips.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("disk-trouble test needs to mount a tmpfs (root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
}

// A full or read-only root gives creates a clear error and leaves nothing
// behind; creates work again once the disk is fixed.
func TestChaosDiskTrouble(t *testing.T) {
	root := t.TempDir()
	mountTmpfs(t, root, "4m")
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{Root: root, PortLo: lo, PortHi: hi})
	call(t, d, "POST", "/v1/sandboxes", `{"name":"before"}`)
	waitState(t, d, "before", "started")

	checkClean := func(name string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(root, name)); !os.IsNotExist(err) {
			t.Fatalf("%s: directory left behind: %v", name, err)
		}
		if code, _ := call(t, d, "GET", "/v1/sandboxes/"+name, ""); code != 404 {
			t.Fatalf("%s: still listed (%d)", name, code)
		}
		_, m := call(t, d, "GET", "/metrics", "")
		if !strings.Contains(string(m), "agent_control_plane_port_leases 1\n") {
			t.Fatalf("%s: a port is leased to nobody", name)
		}
	}

	// Full.
	filler := filepath.Join(root, ".filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").Run() // fills the tmpfs, then fails
	code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"full"}`)
	if code != 500 || !strings.Contains(string(b), "create_failed") || !strings.Contains(string(b), "no space left") {
		t.Fatalf("create on a full disk: %d %s", code, b)
	}
	checkClean("full")
	os.Remove(filler)
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"full"}`); code != 201 {
		t.Fatalf("create after freeing space: %d %s", code, b)
	}
	waitState(t, d, "full", "started")
	call(t, d, "DELETE", "/v1/sandboxes/full", "")

	// Read-only. The root cannot be remounted read-only while the daemon
	// and the children hold files open for writing, so a read-only bind
	// mount is laid over it: every new open through the path fails.
	for _, args := range [][]string{{"--bind", root, root}, {"-o", "remount,bind,ro", root}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v %s", args, err, out)
		}
	}
	code, b = call(t, d, "POST", "/v1/sandboxes", `{"name":"ro"}`)
	if code != 500 || !strings.Contains(string(b), "read-only file system") {
		t.Fatalf("create on a read-only disk: %d %s", code, b)
	}
	if out, err := exec.Command("umount", root).CombinedOutput(); err != nil {
		t.Fatalf("umount the read-only bind: %v %s", err, out)
	}
	checkClean("ro")
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"ro"}`); code != 201 {
		t.Fatalf("create after remount rw: %d %s", code, b)
	}
	waitState(t, d, "ro", "started")
	if info := get(t, d, "before"); info.State != "started" {
		t.Fatalf("existing sandbox disturbed: %+v", info)
	}
}

// daemonGauges reads the daemon's goroutine count from /metrics and its
// open fds from /proc.
func daemonGauges(t *testing.T, d *testenv.Daemon) (goroutines, fds int) {
	t.Helper()
	_, m := call(t, d, "GET", "/metrics", "")
	for _, line := range strings.Split(string(m), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			goroutines, _ = strconv.Atoi(v)
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Cmd.Process.Pid))
	return goroutines, len(ents)
}

// 200 concurrent clients on list, get, refresh-activity and event streams
// while sandboxes churn: no 5xx, and no goroutines or fds left behind.
//
// It is long because its rounds of kills and restarts share the load it
// keeps running and the checks after each.
func TestChaosLoad(t *testing.T) {
	d := startDaemon(t)
	for i := range 5 {
		call(t, d, "POST", "/v1/sandboxes", fmt.Sprintf(`{"name":"steady%d","autoStopInterval":0}`, i))
	}
	for i := range 5 {
		waitState(t, d, fmt.Sprintf("steady%d", i), "started")
	}
	g0, fd0 := daemonGauges(t, d)

	tr := &http.Transport{MaxIdleConnsPerHost: 200, DialContext: (&net.Dialer{}).DialContext}
	c := &http.Client{Transport: testenv.AuthTransport{Token: d.Token, Base: tr}, Timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var requests, fivexx atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			id := fmt.Sprintf("steady%d", i%5)
			for ctx.Err() == nil {
				var req *http.Request
				switch i % 4 {
				case 0:
					req, _ = http.NewRequestWithContext(ctx, "GET", d.URL+"/v1/sandboxes", nil)
				case 1:
					req, _ = http.NewRequestWithContext(ctx, "GET", d.URL+"/v1/sandboxes/"+id, nil)
				case 2:
					req, _ = http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/sandboxes/"+id+"/refresh-activity", nil)
				default:
					// An event stream held for a while, then dropped.
					sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
					req, _ = http.NewRequestWithContext(sctx, "GET", d.URL+"/v1/events", nil)
					if resp, err := c.Do(req); err == nil {
						requests.Add(1)
						if resp.StatusCode >= 500 {
							fivexx.Add(1)
						}
						buf := make([]byte, 4096)
						for {
							if _, err := resp.Body.Read(buf); err != nil {
								break
							}
						}
						resp.Body.Close()
					}
					scancel()
					continue
				}
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				requests.Add(1)
				if resp.StatusCode >= 500 {
					fivexx.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Go(func() { // churn
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("churn%d", i%8)
			for _, m := range []string{"POST", "DELETE"} {
				path, body := "/v1/sandboxes/"+id, ""
				if m == "POST" {
					path, body = "/v1/sandboxes", `{"name":"`+id+`"}`
				}
				req, _ := http.NewRequestWithContext(ctx, m, d.URL+path, strings.NewReader(body))
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if resp, err := c.Do(req); err == nil {
					requests.Add(1)
					if resp.StatusCode >= 500 {
						fivexx.Add(1)
					}
					resp.Body.Close()
				}
			}
		}
	})
	wg.Wait()
	tr.CloseIdleConnections()
	t.Logf("%d requests, %d 5xx", requests.Load(), fivexx.Load())
	if fivexx.Load() != 0 || requests.Load() < 1000 {
		t.Fatalf("%d of %d requests answered 5xx", fivexx.Load(), requests.Load())
	}
	for i := range 8 {
		call(t, d, "DELETE", fmt.Sprintf("/v1/sandboxes/churn%d", i), "")
	}
	testenv.Eventually(t, "goroutines and fds back to their level", func() bool {
		g, fd := daemonGauges(t, d)
		return g <= g0+5 && fd <= fd0+5
	})
}
