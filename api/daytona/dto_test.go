package daytona

import (
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// Daytona's state is a pure function of the daemon's state, what is
// being done to the sandbox and why it stopped.
func TestStateOf(t *testing.T) {
	stop := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		sb             supervisor.Sandbox
		state, desired string
	}{
		{supervisor.Sandbox{State: supervisor.Starting}, StateStarting, StateStarted},
		{supervisor.Sandbox{State: supervisor.Started}, StateStarted, StateStarted},
		{supervisor.Sandbox{State: supervisor.Started, Teardown: supervisor.TeardownStop}, StateStopping, StateStopped},
		{supervisor.Sandbox{State: supervisor.Started, Teardown: supervisor.TeardownDelete}, StateDestroying, StateDestroyed},
		{supervisor.Sandbox{State: supervisor.Stopped, Teardown: supervisor.TeardownDelete}, StateDestroying, StateDestroyed},
		{supervisor.Sandbox{State: supervisor.Stopped, StopReason: supervisor.StopExplicit}, StateStopped, StateStopped},
		{supervisor.Sandbox{State: supervisor.Stopped, StopReason: supervisor.StopCrashed}, StateStopped, StateStopped},
		{supervisor.Sandbox{State: supervisor.Stopped, StopReason: supervisor.StopStartupFailed}, StateError, StateStarted},
		{supervisor.Sandbox{State: supervisor.Destroyed}, StateDestroyed, StateDestroyed},
		{archivedAt(stop, stop, supervisor.Stopped), StateArchived, StateArchived},
		{archivedAt(stop, stop.Add(time.Minute), supervisor.Stopped), StateStopped, StateStopped}, // stopped again since
		{archivedAt(stop, time.Time{}, supervisor.Started), StateStarted, StateStarted},
	} {
		if state, desired := stateOf(c.sb); state != c.state || desired != c.desired {
			t.Errorf("%s (teardown %q, %s): %s/%s, want %s/%s", c.sb.State, c.sb.Teardown, c.sb.StopReason, state, desired, c.state, c.desired)
		}
	}
}

// archivedAt is a sandbox in state st, stopped at stopped, archived at
// the stop of archived.
func archivedAt(archived, stopped time.Time, st supervisor.State) supervisor.Sandbox {
	return supervisor.Sandbox{State: st, StoppedAt: stopped,
		Extensions: supervisor.Extensions{extensionKey: extension{ArchivedStop: archived}.raw()}}
}
