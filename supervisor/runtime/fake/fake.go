// Package fake is a runtime whose workloads live in the daemon's own
// process: each one a goroutine serving HTTP on a loopback listener of its
// own, with its files in the real workspace directory. It lets the
// supervisor's state machine, locks and events, and the API's handlers, be
// tested in milliseconds, and it passes the same conformance suite
// (runtimetest) as the runtimes it stands in for.
//
// A workload reads the stub agent's knobs from its variables, so a test
// asks any runtime for the same behaviour: STUB_AGENT_READY_DELAY_MS,
// STUB_AGENT_EXIT_AFTER_MS (exit with code 3), STUB_AGENT_IGNORE_SIGTERM=1
// and STUB_AGENT_PRINT. Exec runs Tool.
package fake

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	osproc "github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
)

const stateVersion = 1

// Machine is what outlives a daemon: the workloads. Runtimes made over one
// Machine see the same workloads, as a restarted daemon sees the
// processes its predecessor left.
type Machine struct {
	mu   sync.Mutex
	live map[string]*handle // by marker, until Delete or a sweep
	// Deletes counts Delete calls by marker: the supervisor must call it
	// exactly once per workload.
	deletes map[string]int
}

// NewMachine returns an empty machine.
func NewMachine() *Machine {
	return &Machine{live: map[string]*handle{}, deletes: map[string]int{}}
}

// Deletes returns how often Delete was called for marker.
func (m *Machine) Deletes(marker string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletes[marker]
}

// Shutdown ends every workload, as a machine that powers off: nothing of
// them is left running (tests call it at their end).
func (m *Machine) Shutdown() {
	m.mu.Lock()
	hs := make([]*handle, 0, len(m.live))
	for _, h := range m.live {
		hs = append(hs, h)
	}
	m.mu.Unlock()
	for _, h := range hs {
		h.end(runtime.Exit{Code: 137, Signal: unix.SIGKILL})
	}
}

// Live returns how many workloads have not been deleted or swept.
func (m *Machine) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// Runtime is the fake runtime over a Machine.
type Runtime struct {
	M *Machine
	// LocalPort serves each workload on the port the daemon leases
	// (Spec.Port); otherwise on one of its own, reported only through the
	// handle's Endpoint, as a workload that lives elsewhere is.
	LocalPort bool
	// Images: the runtime says it runs images (a create may name one).
	Images bool
	// BlockUsage, when set, holds every Usage call until it is closed
	// or the call's ctx ends: a slow engine.
	BlockUsage chan struct{}
	// UsageCalls counts Usage calls.
	UsageCalls atomic.Int64
	// FailStart, when set, is returned by Start.
	FailStart error
}

var (
	_ runtime.Runtime     = (*Runtime)(nil)
	_ runtime.Limiter     = (*Runtime)(nil)
	_ runtime.Pruner      = (*Runtime)(nil)
	_ runtime.Resizer     = (*handle)(nil)
	_ runtime.LimitReader = (*handle)(nil)
	_ runtime.Meter       = (*handle)(nil)
	_ runtime.Execer      = (*handle)(nil)
	_ runtime.Files       = (*handle)(nil)
)

// Capabilities: everything but isolation and remoteness; images when
// Images says so (the image is then only a name).
// FilesAtRest are a stopped sandbox's workspace files (runtime.AtRest).
func (r *Runtime) FilesAtRest(dir string) runtime.Files {
	return workspace.Files{Host: dir, Seen: dir}
}

func (r *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{LocalPort: r.LocalPort, Exec: true, Files: true, Limits: true, Images: r.Images}
}

// Enforceable: every limit, as given.
func (r *Runtime) Enforceable(res runtime.Resources) (runtime.Resources, error) { return res, nil }

type state struct {
	Marker string `json:"marker"`
	Nonce  string `json:"nonce"` // proves the state names this very workload
}

// Start runs the workload.
//
// It is long because it plays a workload's whole life in memory (ready,
// exit, signals) as the real runtimes do, from the one spec.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	if r.FailStart != nil {
		return nil, r.FailStart
	}
	if !spec.Network.IsZero() {
		return nil, fmt.Errorf("%w: networkBlockAll and networkAllowList: a fake workload is the test's own process", runtime.ErrNetworkUnsupported)
	}
	addr := "127.0.0.1:0"
	if r.LocalPort {
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(spec.Port))
	}
	env := spec.Environ(map[string]string{runtime.EnvWorkspace: spec.Workspace})
	knob := func(k string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	if spec.Port != 0 {
		env = append(env, runtime.EnvPort+"="+strconv.Itoa(spec.Port))
	}
	h := &handle{
		m: r.M, r: r, marker: spec.Marker, nonce: rand.Text(), env: env,
		Files: workspace.Files{Host: spec.Workspace, Seen: spec.Workspace}, res: spec.Resources,
		Ending: runtime.NewEnding(), term: make(chan struct{}), stopped: make(chan struct{}),
		ignoreTerm: knob("STUB_AGENT_IGNORE_SIGTERM") == "1",
	}
	// The logs exist from the start, as a process's do.
	for i, path := range []string{spec.Stdout, spec.Stderr} {
		line := ""
		if i == 0 {
			line = knob("STUB_AGENT_PRINT")
		}
		if path == "" {
			continue
		}
		if err := appendLine(path, line); err != nil {
			return nil, err
		}
	}
	delay, _ := strconv.Atoi(knob("STUB_AGENT_READY_DELAY_MS"))
	exitAfter, _ := strconv.Atoi(knob("STUB_AGENT_EXIT_AFTER_MS"))
	// With a leased port the workload listens once ready, as the stub
	// does (a probe meanwhile is refused); on a port of its own it
	// listens at once, to know its endpoint, and answers once ready.
	var ln net.Listener
	if !r.LocalPort || delay == 0 {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, err
		}
		h.ep = runtime.Loopback(ln.Addr().(*net.TCPAddr).Port)
	} else {
		h.ep = runtime.Loopback(spec.Port)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"name": "fake", "sandboxId": spec.ID})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	h.srv = srv
	go func() {
		if delay > 0 {
			select {
			case <-time.After(time.Duration(delay) * time.Millisecond):
			case <-h.stopped:
				if ln != nil {
					ln.Close()
				}
				return
			}
		}
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				return
			}
		}
		_ = srv.Serve(ln) // ends at Close
	}()
	go h.live(exitAfter)
	r.M.mu.Lock()
	r.M.live[spec.Marker] = h
	r.M.mu.Unlock()
	return h, nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil { // whatever the umask, as proc's logs
		f.Close()
		return err
	}
	if line != "" {
		_, err = fmt.Fprintln(f, line)
	}
	return errors.Join(err, f.Close())
}

// Adopt finds the workload a state names on the machine.
func (r *Runtime) Adopt(ctx context.Context, st runtime.HandleState) (runtime.Handle, error) {
	var s state
	if st.Version != stateVersion || json.Unmarshal(st.Data, &s) != nil || s.Marker == "" {
		return nil, fmt.Errorf("%w: fake handle version %d", runtime.ErrState, st.Version)
	}
	r.M.mu.Lock()
	h := r.M.live[s.Marker]
	r.M.mu.Unlock()
	switch {
	case h == nil:
		return nil, fmt.Errorf("%w: no workload %s", runtime.ErrGone, s.Marker)
	case h.nonce != s.Nonce:
		return nil, fmt.Errorf("%w: workload %s is another one", runtime.ErrNotOurs, s.Marker)
	}
	return h, nil
}

// Sweep ends and forgets the workloads with markers.
func (r *Runtime) Sweep(ctx context.Context, markers []string, _ runtime.Owned) error {
	for _, mk := range markers {
		r.M.mu.Lock()
		h := r.M.live[mk]
		delete(r.M.live, mk)
		r.M.mu.Unlock()
		if h != nil {
			h.end(runtime.Exit{Code: 137, Signal: unix.SIGKILL})
		}
	}
	return nil
}

// Prune forgets the ended workloads whose marker is known and not kept.
func (r *Runtime) Prune(ctx context.Context, keep []string, own runtime.Owned) error {
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k] = true
	}
	r.M.mu.Lock()
	defer r.M.mu.Unlock()
	for mk, h := range r.M.live {
		if !kept[mk] && own.Known[mk] {
			select {
			case <-h.Done():
				delete(r.M.live, mk)
			default:
			}
		}
	}
	return nil
}

// handle is one workload.
type handle struct {
	m             *Machine
	r             *Runtime
	marker, nonce string
	env           []string
	ep            runtime.Endpoint
	srv           *http.Server
	ignoreTerm    bool
	workspace.Files

	mu  sync.Mutex
	res runtime.Resources
	*runtime.Ending
	term    chan struct{} // a polite stop was asked
	termed  sync.Once
	stopped chan struct{} // closed with done
}

// live ends the workload on its own after exitAfter ms (code 3), or at a
// polite stop it does not ignore (code 0, as the stub's graceful exit).
func (h *handle) live(exitAfter int) {
	var self <-chan time.Time
	if exitAfter > 0 {
		self = time.After(time.Duration(exitAfter) * time.Millisecond)
	}
	select {
	case <-self:
		h.end(runtime.Exit{Code: 3})
	case <-h.term:
		if !h.ignoreTerm {
			h.end(runtime.Exit{Code: 0})
		}
	case <-h.Done():
	}
}

func (h *handle) end(e runtime.Exit) {
	e.At = time.Now()
	if h.End(e) {
		_ = h.srv.Close()
		close(h.stopped)
	}
}

func (h *handle) State() runtime.HandleState {
	b, _ := json.Marshal(state{Marker: h.marker, Nonce: h.nonce})
	return runtime.HandleState{Version: stateVersion, Data: b}
}

func (h *handle) Endpoint() runtime.Endpoint { return h.ep }

// PortEndpoint: a fake workload is the test's own process: a port that process
// listens on is the workload's, any other is not (ErrNotListening), as
// the contract asks of a workload that shares the host's loopback.
func (h *handle) PortEndpoint(_ context.Context, port int) (runtime.Endpoint, error) {
	ok, err := osproc.Listening(port, []int{os.Getpid()})
	if err != nil {
		return runtime.Endpoint{}, err
	}
	if !ok {
		return runtime.Endpoint{}, fmt.Errorf("%w: port %d", runtime.ErrNotListening, port)
	}
	return runtime.Loopback(port), nil
}

// Stop asks politely, waits up to grace, then kills.
func (h *handle) Stop(ctx context.Context, grace time.Duration) error {
	if grace > 0 {
		h.termed.Do(func() { close(h.term) })
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.Done():
			return nil
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.end(runtime.Exit{Code: 137, Signal: unix.SIGKILL})
	return nil
}

// Delete forgets the workload, and counts the call.
func (h *handle) Delete(context.Context) error {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.m.deletes[h.marker]++
	if h.m.live[h.marker] == h {
		delete(h.m.live, h.marker)
	}
	return nil
}

func (h *handle) Resize(_ context.Context, r runtime.Resources) error {
	h.mu.Lock()
	h.res = r
	h.mu.Unlock()
	return nil
}

func (h *handle) Limits(context.Context) (runtime.Resources, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.res, nil
}

// Usage reports a little of each, after BlockUsage if set.
func (h *handle) Usage(ctx context.Context) (runtime.Usage, error) {
	h.r.UsageCalls.Add(1)
	if b := h.r.BlockUsage; b != nil {
		select {
		case <-b:
		case <-ctx.Done():
			return runtime.Usage{}, ctx.Err()
		}
	}
	return runtime.Usage{CPUSeconds: 0.5, MemoryBytes: 1 << 20, Pids: 1}, nil
}

// Exec runs Tool in a goroutine.
func (h *handle) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] != "stub-exec" {
		return nil, fmt.Errorf("%w: %w: the fake runtime runs only stub-exec", runtime.ErrExecStart, runtime.ErrProgramNotFound)
	}
	if spec.TTY {
		return nil, fmt.Errorf("%w: the fake runtime offers no terminal", runtime.ErrExecStart)
	}
	select {
	case <-h.Done():
		return nil, fmt.Errorf("%w: the workload has ended", runtime.ErrExecStart)
	default:
	}
	dir := spec.Dir
	if dir == "" {
		dir = h.Seen
	} else if !path.IsAbs(dir) {
		dir = path.Join(h.Seen, dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: working directory %s", runtime.ErrExecStart, dir)
	}
	p := &proc{Ending: runtime.NewEnding(), kill: make(chan struct{})}
	env := append([]string(nil), h.env...)
	for _, kv := range spec.Env {
		if !strings.HasPrefix(kv, runtime.MarkerEnv+"=") {
			env = append(env, kv)
		}
	}
	stdin := spec.Stdin
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	out := func(w io.Writer) io.Writer {
		if w == nil {
			return io.Discard
		}
		return w
	}
	code := make(chan int, 1)
	errw := out(spec.Stderr)
	if spec.Merged {
		errw = out(spec.Stdout)
	}
	go func() { code <- Tool(spec.Argv[1:], env, dir, stdin, out(spec.Stdout), errw, p.kill) }()
	go func() {
		var expired <-chan time.Time
		if spec.Timeout > 0 {
			expired = time.After(spec.Timeout)
		}
		var e runtime.Exit
		select {
		case c := <-code:
			e = runtime.Exit{Code: c}
			select {
			case <-p.kill: // killed while it ended
				e = runtime.Exit{Code: 137, Signal: unix.SIGKILL}
			default:
			}
		case <-p.kill:
			e = runtime.Exit{Code: 137, Signal: unix.SIGKILL}
		case <-h.Done():
			p.stop()
			e = runtime.Exit{Code: 137, Signal: unix.SIGKILL}
		case <-ctx.Done():
			p.stop()
			e = runtime.Exit{Code: 137, Signal: unix.SIGKILL, Reason: "cancelled"}
		case <-expired:
			p.stop()
			e = runtime.Exit{Code: 137, Signal: unix.SIGKILL, Reason: runtime.ReasonTimeout}
		}
		e.At = time.Now()
		p.End(e)
	}()
	return p, nil
}

type proc struct {
	*runtime.Ending
	kill   chan struct{}
	killed sync.Once
}

func (p *proc) stop() { p.killed.Do(func() { close(p.kill) }) }

func (p *proc) Kill() error { p.stop(); return nil }
