package supervisor

import (
	"context"
	"maps"
	"slices"
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
	for step := range steps {
		if !slices.Contains(CreateSteps, step) {
			t.Errorf("step %q is not in CreateSteps", step)
		}
	}
	if _, err := h.sup.Create(context.Background(), CreateRequest{Name: "a"}); err == nil {
		t.Fatal("a second create of a succeeded")
	}
	if after := h.sup.Stats().CreateSteps; !maps.Equal(after, steps) {
		t.Errorf("a failed create changed the steps' time: %v → %v", steps, after)
	}
}
