package supervisor

import (
	"context"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// A create that succeeds adds its time to each step it went through,
// the native runtime's own included; one that fails adds nothing.
func TestCreateStepsTimed(t *testing.T) {
	h := realHarness(t, nil)
	h.create("a", nil, nil)
	steps := h.sup.Stats().CreateSteps
	for _, step := range []string{StepCheck, StepLease, StepDirectory, runtime.StepSpawn, runtime.StepWatch, StepStart, StepRecord, StepPublish} {
		if steps[step] <= 0 {
			t.Errorf("step %s: %v s, want some time", step, steps[step])
		}
	}
	var sum float64
	for step, v := range steps {
		known := false
		for _, s := range CreateSteps {
			known = known || s == step
		}
		if !known {
			t.Errorf("step %q is not in CreateSteps", step)
		}
		sum += v
	}
	if _, err := h.sup.Create(context.Background(), CreateRequest{Name: "a"}); err == nil {
		t.Fatal("a second create of a succeeded")
	}
	var after float64
	for _, v := range h.sup.Stats().CreateSteps {
		after += v
	}
	if after != sum {
		t.Errorf("a failed create changed the steps' time: %v → %v s", sum, after)
	}
}
