// Package supervisor owns the sandboxes of one root directory: their
// registry, state machine, port leases, persisted records, re-adoption after a
// restart, idle auto-stop and the event feed. It drives workloads only
// through the contract in package runtime (the implementations are wired
// in by the daemon) and knows nothing of HTTP.
package supervisor

import (
	"errors"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// State is a sandbox's lifecycle state; the moves between states are
// the table in state.go.
type State string

const (
	Starting  State = "starting"
	Started   State = "started"
	Stopped   State = "stopped"
	Destroyed State = "destroyed"
)

// Live reports whether a workload may be running in this state.
func (s State) Live() bool { return s == Starting || s == Started }

// StopReason is the closed set of reasons a sandbox stops, for metrics.
type StopReason string

const (
	StopExplicit      StopReason = "explicit"
	StopAutoStopped   StopReason = "auto_stopped"
	StopCrashed       StopReason = "crashed"
	StopStartupFailed StopReason = "startup_failed"
	StopDeleted       StopReason = "deleted"
	StopOther         StopReason = "other" // max lifetime, daemon restart, shutdown
)

// StopReasons lists every StopReason.
var StopReasons = []StopReason{StopExplicit, StopAutoStopped, StopCrashed, StopStartupFailed, StopDeleted, StopOther}

// Error reasons that clients may match on.
const (
	ReasonAutoStopped    = "auto_stopped"
	ReasonMaxLifetime    = "max_lifetime"
	ReasonStartupTimeout = "startup_timeout"       // followed by ": GET <path> <what the last probe got>"
	ReasonExitedStartup  = "exited_during_startup" // followed by ": <how>"
)

// Sandbox is a copy of one sandbox's state. It never holds env values.
type Sandbox struct {
	ID      string
	Runtime string
	State   State
	// Labels are fixed at create and shared by every copy: read them,
	// never modify them.
	Labels   map[string]string
	Snapshot string
	Public   bool
	// Port is the host port leased for the sandbox (0: its runtime
	// serves elsewhere); Endpoint is where its workload serves, as its
	// runtime reports it.
	Port     int
	Endpoint runtime.Endpoint
	// Volumes are mounted into it at each start; fixed at create.
	Volumes []VolumeMount
	// Network is its network policy, from its create (Daytona's
	// networkBlockAll and networkAllowList); fixed at create.
	Network runtime.Network
	// Isolation is runtime.IsolationNamespaces when its workload runs
	// in namespaces of its own (an isolated native sandbox, a
	// container), runtime.IsolationOff when it shares the host's; as
	// its last workload ran ("" before the first started).
	Isolation string

	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastActivityAt time.Time
	StartedAt      time.Time // zero until started
	StoppedAt      time.Time // zero until stopped
	// LaunchedAt is when the current workload was started (a create, or
	// a start again): its startup budget counts from then, also in a
	// daemon that re-adopts it. Zero: CreatedAt.
	LaunchedAt time.Time

	AutoStopInterval time.Duration // 0: never auto-stops
	// AutoDeleteInterval: nil never deletes; 0 deletes right after stop;
	// N deletes N after stop.
	AutoDeleteInterval *time.Duration
	// Extensions are what faces keep with the sandbox (see Extensions).
	Extensions Extensions

	ErrorReason string
	StopReason  StopReason // set once stopped
	// Teardown is a stop or a delete under way (see Teardown).
	Teardown Teardown
	// Workspace is the workspace directory on this machine (Get and
	// ListPage fill it).
	Workspace string

	// Resources are the limits in force; zero fields: none.
	Resources runtime.Resources
	// Usage is what the workload consumes now, where its runtime can
	// say (a contained native sandbox); nil otherwise. Get fills it for
	// live sandboxes, ListPage when asked.
	Usage *runtime.Usage
}

// Name is the sandbox's name; id and name are the same locally.
func (s Sandbox) Name() string { return s.ID }

// AutoStopAt is when an idle sandbox will be stopped, or zero when it will
// not (disabled, or not running).
func (s Sandbox) AutoStopAt() time.Time {
	if s.AutoStopInterval <= 0 || !s.State.Live() {
		return time.Time{}
	}
	return s.LastActivityAt.Add(s.AutoStopInterval)
}

// CreateRequest asks for a new sandbox.
type CreateRequest struct {
	Name     string
	Runtime  string // the registry's default when empty
	Snapshot string
	Env      map[string]string
	Labels   map[string]string
	Public   bool
	// Limits are the request's resource limits; a nil field takes the
	// daemon's default.
	Limits Limits
	// AutoStopInterval nil takes the daemon default; 0 disables.
	AutoStopInterval *time.Duration
	// AutoDeleteInterval nil or negative never deletes; see Sandbox.
	AutoDeleteInterval *time.Duration
	// Extensions: see Sandbox.
	Extensions Extensions
	// Volumes to mount, for a runtime with runtime.Capabilities.Mounts.
	Volumes []VolumeMount
	// Network is the sandbox's network policy; a runtime that cannot
	// enforce it refuses the create (ErrInvalid).
	Network runtime.Network
}

// Limits are resource limits in the core's units, as a request gives
// them: a nil field leaves that limit as it is (at create: the daemon's
// default), zero lifts it.
type Limits struct {
	MilliCPU    *int64 // thousandths of a CPU
	MemoryBytes *int64
	Pids        *int64
}

// over applies l to base and checks the result (limits.Check).
func (l Limits) over(base runtime.Resources) (runtime.Resources, error) {
	r := base
	if l.MilliCPU != nil {
		r.MilliCPU = *l.MilliCPU
	}
	if l.MemoryBytes != nil {
		r.MemoryBytes = *l.MemoryBytes
	}
	if l.Pids != nil {
		r.Pids = *l.Pids
	}
	return limits.Check(r)
}

// Errors returned by the supervisor; check them with errors.Is.
var (
	ErrNotFound           = errors.New("sandbox not found")
	ErrConflict           = errors.New("sandbox name in use")
	ErrInvalid            = field.ErrInvalid
	ErrUnsupportedRuntime = errors.New("unsupported runtime")
	ErrPortsExhausted     = errors.New("port range exhausted")
	ErrNotRunning         = errors.New("sandbox is not running")
	ErrClosed             = errors.New("supervisor closed")
	// ErrLimitsUnsupported: a limit cannot be enforced here (and the
	// daemon is not told to ignore such limits).
	ErrLimitsUnsupported = runtime.ErrLimitsUnsupported
	// ErrImageNotFound: what the create asked to run does not exist here.
	ErrImageNotFound = runtime.ErrImageNotFound
	// ErrProgramNotFound: the program the snapshot runs is not here.
	ErrProgramNotFound = runtime.ErrProgramNotFound
	// ErrRuntimeUnavailable: the runtime cannot be reached now.
	ErrRuntimeUnavailable = runtime.ErrUnavailable
	// ErrTampered: a file or directory of the sandbox's that the daemon
	// made is no longer its own (replaced by a link, say); it is left as
	// it is, and what needed it refused.
	ErrTampered = errors.New("a file of the sandbox is not the daemon's own")
)
