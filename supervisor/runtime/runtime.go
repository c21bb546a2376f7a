// Package runtime is the contract between the supervisor and the things that
// run a sandbox's workload: a detached process group (package native), a
// container, or whatever comes next. The supervisor owns names, ports,
// records, states and events; a runtime owns only the workload, from Start
// (or Adopt after a daemon restart) to Delete.
//
// The shape follows containerd's task API and Nomad's task drivers: a
// runtime starts and re-attaches workloads, a Handle reports a structured
// Exit, and Delete is the one place where what the runtime made for a
// workload (a container, a cgroup) is released, whether the workload exited
// by itself or was stopped.
package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime starts and re-adopts workloads. Its methods are safe for
// concurrent use.
type Runtime interface {
	// Start launches the workload and returns once it exists; readiness is
	// the supervisor's business. On error nothing of the workload remains.
	Start(ctx context.Context, spec Spec) (Handle, error)
	// Adopt reattaches to a workload started by an earlier daemon from the
	// State its Handle reported. It verifies identity before it returns a
	// Handle and signals nothing it cannot verify. A workload that has
	// ended but whose remains the runtime can still see comes back as a
	// Handle whose Done is closed, so that its Exit is known and Delete
	// releases the remains. An error wraps ErrGone (nothing remains),
	// ErrNotOurs (the state names something that is not ours) or
	// ErrState (the state cannot be read).
	Adopt(ctx context.Context, state State) (Handle, error)
	// Sweep ends whatever still carries one of markers: workloads started
	// just before a daemon died, whose handle never reached disk, and
	// leftovers of ones whose leader is gone. One call covers every
	// marker, so a restart looks at the machine once. It removes only
	// what own proves is the daemon's.
	Sweep(ctx context.Context, markers []string, own Owned)
}

// Owned is what the daemon can prove it made, for a runtime that must
// tell its own leftovers from things that only look like them (a
// container run from an image committed from a sandbox carries the
// sandbox's labels; a directory can be made by anyone who may write
// there). A runtime removes only what one of these proves.
type Owned struct {
	// Known holds the markers that a record of this root names: a
	// marker carries random bits, so whatever bears one the daemon made
	// for that sandbox.
	Known map[string]bool
	// Seal returns the seal of a name: an HMAC under a secret of the
	// root that is never published. A runtime that labels what it makes
	// with the seal of its (engine-unique) name can prove it later
	// without any record.
	Seal func(name string) string
}

// Handle is one workload, from Start or Adopt until Delete.
type Handle interface {
	// State is persisted with the sandbox and handed to Runtime.Adopt
	// after a restart.
	State() State
	// Done is closed when the workload has ended.
	Done() <-chan struct{}
	// Exit says how the workload ended. Call it after Done.
	Exit() Exit
	// Stop ends the workload: a polite signal, up to grace to exit, then a
	// forced kill. A grace of zero kills at once. It returns when the
	// workload is gone, or with ctx's error when ctx ends first (the
	// workload may then still be running).
	Stop(ctx context.Context, grace time.Duration) error
	// Delete releases what the runtime holds for the workload once it has
	// ended (a container, a cgroup). The supervisor calls it exactly once
	// per handle, after Done, whether the workload exited by itself or was
	// stopped.
	Delete(ctx context.Context) error
}

// Spec is what a runtime needs to start one sandbox.
type Spec struct {
	ID string
	// Command is the workload's argv, with environment references in
	// the manner of systemd's ExecStart (see ExpandArgv) still to be
	// expanded against the environment the workload gets; empty: the
	// runtime's own default (native: its Argv; a container: the image's).
	Command []string
	// Image is what a runtime that runs images starts; empty: its
	// default.
	Image     string
	Env       []string // KEY=VALUE, complete: nothing else is inherited
	Dir       string   // the sandbox directory
	Workspace string   // the working directory
	Stdout    string   // log file paths
	Stderr    string
	Port      int               // the leased host port the workload serves on
	Marker    string            // unique per sandbox; the workload carries it in MarkerEnv
	Labels    map[string]string // the request's labels
	// Seal is Owned.Seal of the marker, for a runtime that labels what
	// it makes with a proof of ownership.
	Seal      string
	Resources Resources
	// ReadyURL is what the supervisor probes for readiness; a runtime that
	// serves the workload elsewhere reports that through its Handle.
	ReadyURL string
}

// MarkerEnv is the environment variable through which a workload carries
// its marker. Requests may not set it.
const MarkerEnv = "AGENT_CONTROL_PLANE_MARKER"

// Resources are limits for one workload. Zero means no limit.
type Resources struct {
	CPU         float64 `json:"cpu,omitempty"` // CPUs, fractions allowed
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
}

// IsZero reports whether r sets no limit.
func (r Resources) IsZero() bool { return r == Resources{} }

// What the kernel can enforce, which every runtime on Linux shares: a cpu
// limit is a quota of a period counted in whole microseconds (of a 100 ms
// period: steps of 0.00001 CPU); memory is counted in whole pages.
const (
	PageSize = 4096
	cpuSteps = 1e5 // per CPU
)

// Normalized rounds the CPU to its step so that a value read back from
// the kernel and one computed compare equal.
func (r Resources) Normalized() Resources {
	r.CPU = math.Round(r.CPU*cpuSteps) / cpuSteps
	return r
}

// Limiter is a Runtime that can enforce limits. A Runtime that is not one
// enforces none.
type Limiter interface {
	// Enforceable returns the part of r this runtime can enforce on this
	// machine and, when that is not all of r, an error wrapping
	// ErrLimitsUnsupported that names the rest and says why.
	Enforceable(r Resources) (Resources, error)
}

// Pruner is a Runtime that can find what it made for workloads that are
// no longer live (a daemon killed between a workload's end and its
// Delete, or before its record was written) and release it.
type Pruner interface {
	// Prune releases whatever the runtime made for this daemon whose
	// marker is not in keep and that own proves is the daemon's; what
	// only looks like it is logged and left. It is called once at
	// start, before any create.
	Prune(ctx context.Context, keep []string, own Owned)
}

// Isolated is a Runtime whose workloads do not run on the host (a
// container): they get no share of the host's base environment (PATH,
// HOME, …), only the request's variables and those the daemon adds on
// purpose.
type Isolated interface {
	Isolated() bool
}

// ImageRunner is a Runtime whose create may name an image directly as its
// snapshot (a container engine). Other runtimes run only the snapshots the
// daemon is configured with.
type ImageRunner interface {
	RunsImages() bool
}

// Checker is a Runtime that can say whether it works right now (an engine
// it talks to may be down).
type Checker interface {
	// Check returns nil when the runtime can start workloads, or an error
	// wrapping ErrUnavailable that says why not.
	Check(ctx context.Context) error
}

// Resizer is a Handle whose limits can change while its workload runs.
type Resizer interface {
	// Resize applies r; zero fields lift a limit. An error wraps
	// ErrLimitsUnsupported when a limit cannot be enforced.
	Resize(ctx context.Context, r Resources) error
}

// LimitReader is a Handle that can say which limits are in force: read
// back after a restart, so that what the daemon reports is what is
// enforced even when a resize was cut by a crash.
type LimitReader interface {
	Limits(ctx context.Context) (Resources, error)
}

// Meter is a Handle that can say what its workload consumes.
type Meter interface {
	Usage() (Usage, error)
}

// Usage is what a workload consumes: CPU time so far, memory and tasks
// now.
type Usage struct {
	CPUSeconds  float64
	MemoryBytes int64
	Pids        int64
}

// Exit says how a workload ended, in the manner of Nomad's ExitResult.
type Exit struct {
	// Unknown: the runtime could not learn how it ended (an adopted
	// process's status goes to its parent, which is not this daemon).
	Unknown bool
	Code    int            // exit code; 128+signal when killed by a signal
	Signal  syscall.Signal // the terminating signal, or 0
	// OOMKilled: the workload was killed for exceeding its memory limit.
	OOMKilled bool
}

// String says how it ended, as errorReason shows it: "exit code 3",
// "killed by signal SIGKILL", "killed: out of memory (signal SIGKILL)" or
// "exited; status unknown".
func (e Exit) String() string {
	switch {
	case e.OOMKilled && e.Signal != 0:
		return "killed: out of memory (signal " + unix.SignalName(e.Signal) + ")"
	case e.OOMKilled:
		return "killed: out of memory"
	case e.Unknown:
		return "exited; status unknown"
	case e.Signal != 0:
		return "killed by signal " + unix.SignalName(e.Signal)
	default:
		return "exit code " + strconv.Itoa(e.Code)
	}
}

// State is a handle's persisted form. Version belongs to the runtime that
// wrote Data: Adopt refuses versions it does not know rather than misread
// them (ErrState).
type State struct {
	Version int             `json:"version"`
	Data    json.RawMessage `json:"data"`
}

// IsZero reports whether s holds nothing (no handle was recorded).
func (s State) IsZero() bool { return s.Version == 0 && len(s.Data) == 0 }

// Errors wrapped by Adopt.
var (
	ErrGone    = errors.New("workload gone")
	ErrNotOurs = errors.New("workload identity does not match")
	ErrState   = errors.New("unreadable handle state")
	// ErrLimitsUnsupported is wrapped by Start and Resize when a limit
	// cannot be enforced on this machine; nothing was started or changed.
	ErrLimitsUnsupported = errors.New("limits not supported")
	// ErrImageNotFound is wrapped by Start when what it should run (an
	// image) does not exist here; nothing was started.
	ErrImageNotFound = errors.New("image not found")
	// ErrUnavailable is wrapped by Start when the runtime cannot be
	// reached now (a container engine that is down); nothing was started.
	ErrUnavailable = errors.New("runtime unavailable")
)

// Registry holds the runtimes this daemon offers, by name, in the order
// they were registered; the first is the default. It is safe for
// concurrent use.
type Registry struct {
	mu     sync.Mutex
	byName map[string]Runtime
	names  []string
}

// Register adds rt under name. Names are lower-case words.
func (r *Registry) Register(name string, rt Runtime) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" || !validName(name) {
		return fmt.Errorf("runtime name %q: want a lower-case word", name)
	}
	if _, dup := r.byName[name]; dup {
		return fmt.Errorf("runtime %q registered twice", name)
	}
	if r.byName == nil {
		r.byName = map[string]Runtime{}
	}
	r.byName[name] = rt
	r.names = append(r.names, name)
	return nil
}

// Get returns the runtime registered under name.
func (r *Registry) Get(name string) (Runtime, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.byName[name]
	return rt, ok
}

// Names lists the registered names, the default first.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.names)
}

// Default is the name of the first runtime registered, or "".
func (r *Registry) Default() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.names) == 0 {
		return ""
	}
	return r.names[0]
}

func validName(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return s[0] >= 'a' && s[0] <= 'z'
}

// ExpandArgv expands environment references in argv as systemd does in
// ExecStart: "${NAME}" anywhere in an argument is replaced by NAME's value;
// an argument that is exactly "$NAME" is replaced by NAME's value split at
// whitespace (no words when it is empty); "$$" is a literal "$". An
// unset variable expands to nothing. Any other "$" stays as it is. env
// holds KEY=VALUE entries; the last one of a key wins.
func ExpandArgv(argv, env []string) []string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if name, ok := strings.CutPrefix(a, "$"); ok && ValidEnvName(name) {
			out = append(out, strings.Fields(vars[name])...)
			continue
		}
		out = append(out, expandWord(a, vars))
	}
	return out
}

// expandWord replaces "${NAME}" and "$$" in s.
func expandWord(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 || !ValidEnvName(s[i+2:i+2+end]) {
				b.WriteByte('$')
				continue
			}
			b.WriteString(vars[s[i+2:i+2+end]])
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// ValidEnvName reports whether s is a portable environment variable name
// (letters, digits and underscores, not starting with a digit; at most 256
// bytes).
func ValidEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
