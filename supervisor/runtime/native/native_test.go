package native

import (
	"testing"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// The supervisor refuses requests that set runtime.MarkerEnv; proc is what
// puts the marker there. They must name the same variable.
func TestMarkerEnvAgrees(t *testing.T) {
	if proc.MarkerEnv != runtime.MarkerEnv {
		t.Fatalf("proc.MarkerEnv %q != runtime.MarkerEnv %q", proc.MarkerEnv, runtime.MarkerEnv)
	}
}
