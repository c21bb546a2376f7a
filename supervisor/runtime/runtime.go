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
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime starts and re-adopts workloads. Its methods are safe for
// concurrent use.
type Runtime interface {
	// Capabilities says what this runtime offers; it never changes.
	Capabilities() Capabilities
	// Start launches the workload and returns once it exists; readiness is
	// the supervisor's business, probed at the handle's Endpoint. On
	// error nothing of the workload remains.
	Start(ctx context.Context, spec Spec) (Handle, error)
	// Adopt reattaches to a workload started by an earlier daemon from the
	// State its Handle reported. It verifies identity before it returns a
	// Handle and signals nothing it cannot verify. A workload that has
	// ended but whose remains the runtime can still see comes back as a
	// Handle whose Done is closed, so that its Exit is known and Delete
	// releases the remains. An error wraps ErrGone (nothing remains),
	// ErrNotOurs (the state names something that is not ours) or
	// ErrState (the state cannot be read).
	Adopt(ctx context.Context, state HandleState) (Handle, error)
	// Sweep ends whatever still carries one of markers: workloads started
	// just before a daemon died, whose handle never reached disk, and
	// leftovers of ones whose leader is gone. One call covers every
	// marker, so a restart looks at the machine once. It removes only
	// what own proves is the daemon's; an error says what it could not
	// look at or end (the rest was still swept).
	Sweep(ctx context.Context, markers []string, own Owned) error
}

// Capabilities say what a runtime offers, for the supervisor to decide by
// and the API to show. Behaviour stays in interfaces (Limiter, Execer,
// Files, …); a capability that says a runtime has one must be backed by
// it, which runtimetest checks.
type Capabilities struct {
	// LocalPort: the workload serves on a host port the daemon leases
	// for it (Spec.Port). Without it Spec.Port is 0 and the handle's
	// Endpoint alone says where the workload serves.
	LocalPort bool
	// Exec: handles run commands inside the workload (Execer).
	Exec bool
	// Terminal: those commands can have a terminal (ExecSpec.TTY; the
	// Process is then a Terminal).
	Terminal bool
	// Files: handles read and write the workload's files (Files).
	Files bool
	// Limits: the runtime enforces limits (Limiter; handles Resizer).
	Limits bool
	// Isolation: workloads do not run on the host (a container): they get
	// none of the host's base environment (PATH, HOME, …), only the
	// request's variables and those the daemon adds on purpose.
	Isolation bool
	// Remote: workloads run on another machine; their files and
	// processes are nothing the daemon can see on this one.
	Remote bool
	// Mounts: the runtime mounts directories of this machine into its
	// workloads at paths of their own (Spec.Mounts).
	Mounts bool
	// Images: a create may name an image directly as its snapshot (a
	// container engine). Other runtimes run only the snapshots the daemon
	// is configured with.
	Images bool
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
	State() HandleState
	// Endpoint is where the workload serves: what the supervisor probes
	// for readiness, the preview URL and the data plane.
	Endpoint() Endpoint
	// Done is closed when the workload has ended.
	Done() <-chan struct{}
	// OnDone runs f on a goroutine of its own once Done is closed (at
	// once if it is), so that following many workloads costs no goroutine
	// each while they run. Handles that embed Ending have it.
	OnDone(f func())
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

// Endpoint is where a workload serves HTTP: a host (a name or an IP) and
// a port, reached over Scheme ("http" when empty).
type Endpoint struct {
	Scheme string `json:"scheme,omitempty"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
}

// Loopback is the endpoint of a workload that serves on port of this
// machine's loopback.
func Loopback(port int) Endpoint { return Endpoint{Host: "127.0.0.1", Port: port} }

// IsZero reports whether e names no place.
func (e Endpoint) IsZero() bool { return e.Host == "" || e.Port == 0 }

// URL is the endpoint's URL for path (which starts with "/", or is empty).
func (e Endpoint) URL(path string) string {
	scheme := e.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) + path
}

// Spec is what a runtime needs to start one sandbox: facts about it, which
// the runtime turns into what its workload sees (a path inside a
// container, a port, environment variables), and what the request asked
// for.
type Spec struct {
	// Facts.
	ID        string
	Dir       string // the sandbox directory, on this machine
	Workspace string // the workspace directory, on this machine
	Stdout    string // log file paths, on this machine
	Stderr    string
	// Port is the leased host port, for a runtime with
	// Capabilities.LocalPort; 0 otherwise.
	Port   int
	Marker string // unique per sandbox; the workload carries it in MarkerEnv
	// Seal is Owned.Seal of the marker, for a runtime that labels what
	// it makes with a proof of ownership.
	Seal string

	// The request.
	//
	// Command is the workload's argv, with environment references in
	// the manner of systemd's ExecStart (see ExpandArgv) still to be
	// expanded against the environment the workload gets; empty: the
	// runtime's own default (native: its Argv; a container: the image's).
	Command []string
	// Image is what a runtime that runs images starts; empty: its
	// default.
	Image string
	// Vars are the workload's variables as KEY=VALUE: the request's,
	// the snapshot's, the forwarded ones and, for a runtime without
	// Capabilities.Isolation, the host's base. The runtime adds the
	// facts (Environ) as its workload sees them.
	Vars      []string
	Labels    map[string]string // the request's labels
	Resources Resources
	// Mounts are directories of this machine the workload sees at paths
	// of its own (volumes), for a runtime with Capabilities.Mounts.
	Mounts []Mount
	// Isolation is the snapshot's ask (IsolationNamespaces or
	// IsolationOff); empty: the runtime's own mode.
	Isolation string
	// Binds are the snapshot's extra directories of this machine for an
	// isolated workload, which sees nothing of the host but what it is
	// given.
	Binds []Bind
	// Network is the workload's network policy; a runtime that cannot
	// enforce it fails Start with ErrNetworkUnsupported.
	Network Network
}

// Isolation modes: a workload in namespaces of its own (a container is
// one too), or a process of the daemon's user on the host.
const (
	IsolationNamespaces = "namespaces"
	IsolationOff        = "off"
)

// Isolated is a Handle that says whether its workload runs in namespaces
// of its own (IsolationNamespaces) or not (IsolationOff).
type Isolated interface {
	Isolation() string
}

// Bind is a directory (or file) of this machine an isolated workload sees
// at Target (its own path when empty).
type Bind struct {
	Source   string `json:"source" toml:"source"`
	Target   string `json:"target,omitempty" toml:"target"`
	ReadOnly bool   `json:"readOnly,omitempty" toml:"read_only"`
}

// Network is a workload's network policy, in Daytona's terms: BlockAll
// gives it no network but what the daemon forwards; AllowList (CIDRs)
// lets it reach those networks only. Zero: the outside network.
type Network struct {
	BlockAll  bool     `json:"blockAll,omitempty"`
	AllowList []string `json:"allowList,omitempty"`
}

// IsZero reports whether n restricts nothing.
func (n Network) IsZero() bool { return !n.BlockAll && len(n.AllowList) == 0 }

// Mount is a directory of this machine (Source) seen by a workload at
// Target, read-write.
type Mount struct {
	Source, Target string
}

// Variables the workload is told its facts in. A request may set none of
// them but HOST, which a runtime whose workload must listen on every
// interface (a container) sets over the request's.
const (
	EnvSandboxID = "AGENT_SANDBOX_ID"
	EnvPort      = "PORT"
	EnvHost      = "HOST"
	EnvWorkspace = "AGENT_WORKSPACE_DIR"
)

// Reserved reports whether a request may not set variable name: the
// marker and the facts the runtime sets as its workload sees them.
func Reserved(name string) bool {
	switch name {
	case MarkerEnv, EnvSandboxID, EnvPort, EnvWorkspace:
		return true
	}
	return false
}

// Environ is the environment a workload sees: spec's Vars, then its id
// and marker, then facts (port, host, workspace as the runtime gives
// them), each replacing a variable of its name.
func (spec Spec) Environ(facts map[string]string) []string {
	own := map[string]string{EnvSandboxID: spec.ID, MarkerEnv: spec.Marker}
	for k, v := range facts {
		own[k] = v
	}
	out := make([]string, 0, len(spec.Vars)+len(own))
	for _, kv := range spec.Vars {
		k, _, _ := strings.Cut(kv, "=")
		if _, mine := own[k]; !mine {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(own)) {
		out = append(out, k+"="+own[k])
	}
	return out
}

// MarkerEnv is the environment variable through which a workload carries
// its marker. Requests may not set it.
const MarkerEnv = "AGENT_CONTROL_PLANE_MARKER"

// Resources are limits for one workload. Zero means no limit.
type Resources struct {
	MilliCPU    int64 `json:"milliCpu,omitempty"` // thousandths of a CPU
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
}

// IsZero reports whether r sets no limit.
func (r Resources) IsZero() bool { return r == Resources{} }

// PageSize is the unit in which the kernel counts memory: a memory limit
// is a whole number of pages.
const PageSize = 4096

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
	// start, before any create. An error says what it could not look at
	// or release.
	Prune(ctx context.Context, keep []string, own Owned) error
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

// Meter is a Handle that can say what its workload consumes. Usage may
// block (an engine asked over a socket): callers bound it with ctx. A
// handle that cannot meter this workload (a native sandbox without a
// cgroup) fails with an error wrapping ErrNotMetered.
type Meter interface {
	Usage(ctx context.Context) (Usage, error)
}

// ErrNotMetered: the handle cannot say what its workload consumes.
var ErrNotMetered = errors.New("the workload's usage cannot be read")

// Ports is a Handle whose workload's other ports the daemon can reach:
// previews of any port it listens on. PortEndpoint is where port, as the
// workload listens on it, is reached from this machine (the shared
// loopback for a process, the container's address on the daemon's
// network for a container). Where that address is shared with what is
// not the workload's (the host's loopback), it fails with an error
// wrapping ErrNotListening unless a process of the workload listens on
// port: a preview reaches what its sandbox serves and nothing else.
type Ports interface {
	PortEndpoint(ctx context.Context, port int) (Endpoint, error)
}

// PortDialer is a Handle whose workload has a network of its own: its
// ports are reached by dialling through the handle (PortEndpoint then
// only says whether something listens).
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// ErrNotListening: no process of the workload listens on the port asked
// for (yet).
var ErrNotListening = errors.New("no process of the sandbox listens on that port")

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
	// Reason is what ended it when that was not the workload's own
	// doing and Code and Signal do not say it: "timeout" for an exec
	// past its time, or a runtime's own word ("evicted", "archived").
	Reason string
	// At is when it ended, or the zero time when the runtime cannot
	// tell (a process adopted after it ended).
	At time.Time
}

// String says how it ended, as errorReason shows it: "exit code 3",
// "killed by signal SIGKILL", "killed: out of memory (signal SIGKILL)" or
// "exited; status unknown", or its Reason.
func (e Exit) String() string {
	switch {
	case e.Reason != "":
		return e.Reason
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

// HandleState is a handle's persisted form. Version belongs to the runtime that
// wrote Data: Adopt refuses versions it does not know rather than misread
// them (ErrState).
type HandleState struct {
	Version int             `json:"version"`
	Data    json.RawMessage `json:"data"`
}

// IsZero reports whether s holds nothing (no handle was recorded).
func (s HandleState) IsZero() bool { return s.Version == 0 && len(s.Data) == 0 }

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
	// ErrProgramNotFound is wrapped by Start when the program it should
	// run (a snapshot's command) does not exist here or cannot be run;
	// nothing was started.
	ErrProgramNotFound = errors.New("program not found")
	// ErrNetworkUnsupported is wrapped by Start when the workload's
	// network policy cannot be enforced (a workload that shares the
	// host's network); nothing was started.
	ErrNetworkUnsupported = errors.New("network policy not supported")
	// ErrIsolationUnsupported is wrapped by Start when a snapshot asks
	// for isolation this runtime cannot give here; nothing was started.
	ErrIsolationUnsupported = errors.New("isolation not supported")
	// ErrUnavailable is wrapped by Start when the runtime cannot be
	// reached now (a container engine that is down); nothing was started.
	ErrUnavailable = errors.New("runtime unavailable")
)
