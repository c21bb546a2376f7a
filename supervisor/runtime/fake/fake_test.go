package fake_test

import (
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/runtimetest"
)

func TestConformance(t *testing.T) {
	for _, local := range []bool{true, false} {
		name := "own endpoint"
		if local {
			name = "leased port"
		}
		t.Run(name, func(t *testing.T) {
			m := fake.NewMachine()
			runtimetest.Run(t, runtimetest.Harness{
				New: func(*testing.T) runtime.Runtime { return &fake.Runtime{M: m, LocalPort: local} },
				Workload: func(spec *runtime.Spec, knobs map[string]string) {
					for k, v := range knobs {
						spec.Vars = append(spec.Vars, k+"="+v)
					}
				},
				Tool:  []string{"stub-exec"},
				Forge: runtimetest.ForgeField("nonce", "forged"),
			})
		})
	}
}
