package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/runtimetest"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
	"golang.org/x/sys/unix"
)

// The supervisor refuses requests that set runtime.MarkerEnv; proc is what
// puts the marker there. They must name the same variable.
func TestMarkerEnvAgrees(t *testing.T) {
	if proc.MarkerEnv != runtime.MarkerEnv {
		t.Fatalf("proc.MarkerEnv %q != runtime.MarkerEnv %q", proc.MarkerEnv, runtime.MarkerEnv)
	}
}

// The native runtime passes the conformance suite, with cgroups (where the
// machine has them) and without.
func TestConformance(t *testing.T) {
	bin := testenv.Binary(t)
	for _, v := range []struct {
		name                string
		contained, isolated bool
	}{{"cgroups", true, false}, {"process groups", false, false}, {"isolated", true, true}} {
		contained, isolated := v.contained, v.isolated
		t.Run(v.name, func(t *testing.T) {
			iso := Isolation{}
			if isolated {
				if err := Probe(); err != nil {
					t.Skipf("no isolation on this machine: %v", err)
				}
				iso = Isolation{Default: runtime.IsolationNamespaces}
			}
			var cg *cgroup.Manager
			if contained {
				m, info := cgroup.Detect(cgroup.Options{Name: fmt.Sprintf("acp-rt-%d-%x", os.Getpid(), rand.Uint32())})
				if m == nil {
					t.Skipf("no cgroup containment on this machine: %s", info.Note)
				}
				t.Cleanup(func() { m.Close(); m.Prune() })
				cg = m
			}
			runtimetest.Run(t, runtimetest.Harness{
				New: func(t *testing.T) runtime.Runtime {
					w, err := proc.NewWatcher()
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { w.Close() })
					return &Runtime{Watcher: w, Argv: []string{bin, "stub-agent"}, Cgroups: cg, Isolation: iso}
				},
				Workload: func(spec *runtime.Spec, knobs map[string]string) {
					for k, v := range knobs {
						spec.Vars = append(spec.Vars, k+"="+v)
					}
					if isolated {
						// The tool the suite execs is none of the
						// host's system programs.
						spec.Binds = append(spec.Binds, runtime.Bind{Source: testenv.ToolArgv(t)[0], ReadOnly: true})
					}
				},
				Tool:  testenv.ToolArgv(t),
				Forge: runtimetest.ForgeField("marker", "someone.else"),
			})
		})
	}
}

// Without a cgroup, a command an earlier daemon started by Exec still
// ends with its sandbox: it carries the sandbox's marker.
func TestExecEndsWithAdoptedSandbox(t *testing.T) {
	bin := testenv.Binary(t)
	w1, err := proc.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	rt1 := &Runtime{Watcher: w1, Argv: []string{bin, "stub-agent"}}
	spec := runtimetest.Spec(t, rt1, "execadopt")
	h, err := rt1.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.(runtime.Execer).Exec(context.Background(), runtime.ExecSpec{Argv: append(testenv.ToolArgv(t), "sleep", "120")})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.(*execProc).p.(spawned).p.Identity().PID
	st := h.State()
	w1.Close() // the daemon is gone; its children are not

	w2, err := proc.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	a, err := (&Runtime{Watcher: w2, Argv: []string{bin, "stub-agent"}}).Adopt(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(testenv.Context(t), 0); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the exec's command ended", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil) // the zombie is this process's child
}
