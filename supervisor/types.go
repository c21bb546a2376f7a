// Package supervisor owns the sandboxes of one root directory: their
// registry, state machine, port leases, persisted records, re-adoption after a
// restart, idle auto-stop and the event feed. It drives workloads through the
// Runtime interface (proc for native children) and knows nothing of HTTP.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// State is a sandbox's lifecycle state. The only transitions are
// starting → started → stopped → destroyed, starting → stopped, and
// stopped → destroyed. Stop is terminal: a stopped sandbox never runs again.
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
	ReasonStartupTimeout = "startup_timeout"
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
	Port     int

	CreatedAt      time.Time
	UpdatedAt      time.Time
	LastActivityAt time.Time
	StartedAt      time.Time // zero until started
	StoppedAt      time.Time // zero until stopped

	AutoStopInterval time.Duration // 0: never auto-stops
	// AutoDeleteInterval: nil never deletes; 0 deletes right after stop;
	// N deletes N after stop.
	AutoDeleteInterval *time.Duration

	ErrorReason string
	StopReason  StopReason // set once stopped
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
	Runtime  string // "native" when empty
	Snapshot string
	Env      map[string]string
	Labels   map[string]string
	Public   bool
	// AutoStopInterval nil takes the daemon default; 0 disables.
	AutoStopInterval *time.Duration
	// AutoDeleteInterval nil or negative never deletes; see Sandbox.
	AutoDeleteInterval *time.Duration
}

// Errors returned by the supervisor; check them with errors.Is.
var (
	ErrNotFound           = errors.New("sandbox not found")
	ErrConflict           = errors.New("sandbox name in use")
	ErrInvalid            = errors.New("invalid request")
	ErrUnsupportedRuntime = errors.New("unsupported runtime")
	ErrPortsExhausted     = errors.New("port range exhausted")
	ErrNotRunning         = errors.New("sandbox is not running")
	ErrClosed             = errors.New("supervisor closed")

	// ErrGone is wrapped by Runtime.Adopt when the workload has exited.
	ErrGone = errors.New("workload gone")
	// ErrNotOurs is wrapped by Runtime.Adopt when the recorded handle now
	// names something that is not ours (a reused PID).
	ErrNotOurs = errors.New("workload identity does not match")
)

// Runtime starts and re-adopts the workload of a sandbox. Implementations:
// the native runtime (a detached child process); a container runtime slots
// in beside it.
type Runtime interface {
	// Start launches the workload and returns once it exists; readiness is
	// the supervisor's business. On error nothing of the workload remains.
	Start(ctx context.Context, spec Spec) (Handle, error)
	// Adopt reattaches to a workload started by an earlier daemon, from the
	// state its Handle reported. It must verify identity before returning a
	// Handle and must signal nothing it cannot verify. An error means the
	// workload is gone or is not ours.
	Adopt(ctx context.Context, state json.RawMessage) (Handle, error)
	// Sweep kills whatever still carries one of markers: workloads
	// started just before a daemon died, whose handle never reached disk,
	// and leftovers of ones whose leader is gone. One call covers every
	// marker, so a restart looks at the machine once.
	Sweep(ctx context.Context, markers []string)
}

// Spec is what a Runtime needs to start one sandbox.
type Spec struct {
	ID        string
	Env       []string // KEY=VALUE, complete
	Dir       string   // the sandbox directory
	Workspace string   // the working directory
	Stdout    string   // log file paths
	Stderr    string
	Port      int
	Marker    string // unique per sandbox; identifies its processes
	Snapshot  string
}

// Handle is one running workload.
type Handle interface {
	// State is persisted and handed to Runtime.Adopt after a restart.
	State() json.RawMessage
	// Done is closed when the workload has exited.
	Done() <-chan struct{}
	// ExitReason says how it ended, after Done: "exit code 1", "killed by
	// signal SIGKILL", "exited; status unknown".
	ExitReason() string
	// Stop ends the workload: a polite signal, up to grace to exit, then a
	// forced kill. A grace of zero kills at once. It returns when the
	// workload is gone or ctx ends.
	Stop(ctx context.Context, grace time.Duration) error
}
