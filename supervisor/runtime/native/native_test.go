package native

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/runtimetest"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
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
	for _, contained := range []bool{true, false} {
		name := "process groups"
		if contained {
			name = "cgroups"
		}
		t.Run(name, func(t *testing.T) {
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
					return &Runtime{Watcher: w, Argv: []string{bin, "stub-agent"}, Cgroups: cg}
				},
				Workload: func(spec *runtime.Spec, knobs map[string]string) {
					for k, v := range knobs {
						spec.Vars = append(spec.Vars, k+"="+v)
					}
				},
				Tool:  []string{bin, "stub-exec"},
				Forge: runtimetest.ForgeField("marker", "someone.else"),
			})
		})
	}
}
