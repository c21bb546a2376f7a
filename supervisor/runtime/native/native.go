// Package native is the runtime that runs each sandbox as a detached child
// process group of the daemon, pinned by a pidfd and identified by a marker
// (package proc does the work), and, where the machine allows, contained
// in a cgroup of its own (package cgroup): then nothing the sandbox starts
// outlives it, and its limits hold.
package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native/isolate"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
)

// Versions of the handle state this runtime writes: 1 is a proc.Identity
// as JSON; 2 adds the sandbox's cgroup.
const (
	stateProcess = 1
	stateCgroup  = 2
)

// state is a handle's persisted form. Port and Workspace came later: a
// state without them is adopted with no endpoint and no files (the
// supervisor knows the port from its record).
type state struct {
	proc.Identity
	Cgroup    *cgroup.Ref `json:"cgroup,omitempty"`
	Port      int         `json:"port,omitempty"`
	Workspace string      `json:"workspace,omitempty"`
	// Control is an isolated sandbox's control directory (its init's
	// socket); empty: not isolated.
	Control string `json:"control,omitempty"`
}

// Runtime runs argv once per sandbox, supervised by a proc.Watcher.
type Runtime struct {
	Watcher *proc.Watcher
	// Argv runs when a spec gives no command.
	Argv []string
	// Cgroups contains each sandbox in a cgroup of its own and enforces
	// its limits; nil means process groups only, and no limits.
	Cgroups *cgroup.Manager
	// Isolation isolates sandboxes in namespaces of their own; the zero
	// value runs them on the host.
	Isolation Isolation
	// isolationRefused is why this machine cannot isolate (Probe), for
	// a snapshot that asks; nil: it can, or nobody looked.
	isolationRefused error
}

// SetIsolationRefused records why this machine cannot isolate
// sandboxes, for the error of a snapshot that asks.
func (n *Runtime) SetIsolationRefused(err error) { n.isolationRefused = err }

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Limiter = (*Runtime)(nil)
	_ runtime.Pruner  = (*Runtime)(nil)
)

// Capabilities: a host port, exec and files in the workspace; limits
// with cgroups; mounts (volumes) where sandboxes are isolated.
// FilesAtRest are a stopped sandbox's workspace files (runtime.AtRest).
func (n *Runtime) FilesAtRest(dir string) runtime.Files {
	return workspace.Files{Host: dir, Seen: dir}
}

func (n *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{LocalPort: true, Exec: true, Terminal: true, Files: true, Limits: n.Cgroups != nil,
		Mounts: n.Isolation.Default == runtime.IsolationNamespaces}
}

// handle is one sandbox: its leader process and, when contained, its
// cgroup. With a cgroup, the sandbox ends when the leader has exited and
// the cgroup is empty: whatever the leader left behind is killed first.
type handle struct {
	p               *proc.Process // nil: adopted remains of a sandbox whose leader was gone
	id              proc.Identity // the leader's, also when p is nil
	g               *cgroup.Group // nil: not contained
	w               *proc.Watcher // spawns execs
	workspace.Files               // Host empty: a state from before files
	port            int
	init            *isolate.Init // nil: not isolated

	// end is the sandbox's end with a cgroup: the leader gone and the
	// group empty. Without one, the leader's own end is the sandbox's.
	end *runtime.Ending

	execs execs // commands started by Exec that may still run
}

var (
	_ runtime.Resizer     = (*handle)(nil)
	_ runtime.Meter       = (*handle)(nil)
	_ runtime.LimitReader = (*handle)(nil)
	_ runtime.Execer      = (*handle)(nil)
	_ runtime.Files       = (*handle)(nil)
)

// Start spawns the child, in a new cgroup when the runtime has them.
func (n *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	if _, err := n.Enforceable(spec.Resources); err != nil {
		return nil, err
	}
	mode, err := n.mode(spec)
	if err != nil {
		return nil, err
	}
	var g *cgroup.Group
	if n.Cgroups != nil {
		var err error
		if g, err = n.Cgroups.Create(spec.Marker, cgroup.Limits(spec.Resources)); err != nil {
			return nil, err
		}
		runtime.Mark(ctx, runtime.StepCgroup)
	}
	argv := spec.Command
	if len(argv) == 0 {
		argv = n.Argv
	}
	port := spec.Port
	if mode == runtime.IsolationNamespaces {
		port = isolate.AgentPort // the leased port is forwarded to it
	}
	env := spec.Environ(map[string]string{
		runtime.EnvPort:      strconv.Itoa(port),
		runtime.EnvWorkspace: spec.Workspace,
	})
	ps := proc.Spec{
		Argv:   runtime.ExpandArgv(argv, env),
		Env:    env,
		Dir:    spec.Workspace,
		Stdout: spec.Stdout,
		Stderr: spec.Stderr,
		Marker: spec.Marker,
	}
	if g != nil {
		ps.Cgroup = g
	}
	config, cfg := (*os.File)(nil), isolate.Config{}
	if mode == runtime.IsolationNamespaces {
		var spent []*os.File
		config, spent, cfg, err = n.isolatedSpec(spec, &ps, ps.Argv)
		if err != nil {
			if g != nil {
				g.Close()
				_ = g.Remove()
			}
			return nil, err
		}
		defer config.Close()
		defer closeFiles(spent)
	}
	p, err := n.Watcher.Spawn(ps)
	if err == nil && config != nil {
		err = n.awaitIsolated(ctx, spec, cfg, p, g, config)
	}
	if g != nil {
		g.Close() // nothing else is spawned into it
	}
	if err != nil {
		if g != nil {
			// Nothing ran in it: a failed spawn leaves no process.
			_ = g.Remove()
		}
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: %s: %v", runtime.ErrProgramNotFound, argv[0], err)
		}
		return nil, err
	}
	runtime.Mark(ctx, runtime.StepSpawn)
	control := ""
	if config != nil {
		control = filepath.Join(spec.Dir, ControlDir)
	}
	h := n.newHandle(p, p.Identity(), g, state{Port: spec.Port, Workspace: spec.Workspace, Control: control})
	runtime.Mark(ctx, runtime.StepWatch)
	return h, nil
}

// Enforceable is r without the limits the machine's cgroups cannot
// enforce.
func (n *Runtime) Enforceable(r runtime.Resources) (runtime.Resources, error) {
	if err := limits.OverMachine(r, "a native sandbox"); err != nil {
		return runtime.Resources{}, err
	}
	got, err := n.Cgroups.Enforceable(cgroup.Limits(r))
	if err != nil {
		return runtime.Resources(got), fmt.Errorf("%w: %v", runtime.ErrLimitsUnsupported, err)
	}
	return runtime.Resources(got), nil
}

func (n *Runtime) newHandle(p *proc.Process, id proc.Identity, g *cgroup.Group, s state) *handle {
	h := &handle{p: p, id: id, g: g, w: n.Watcher, port: s.Port, Files: workspace.Files{Host: s.Workspace, Seen: s.Workspace}}
	if s.Control != "" {
		h.init = &isolate.Init{Control: s.Control, PID: id.PID}
	}
	if g == nil {
		// The process is the whole sandbox; what Exec started ends
		// with it. And what a daemon before this one started by Exec:
		// it carries the sandbox's marker.
		p.OnExit(func() {
			h.execs.kill()
			n.Watcher.KillMarked(id.Marker)
		})
		return h
	}
	h.end = runtime.NewEnding()
	if p == nil {
		go h.finish(n.Watcher.Closed())
	} else {
		// No goroutine waits while the leader lives.
		p.OnExit(func() { h.finish(n.Watcher.Closed()) })
	}
	return h
}

// exitOf is how the leader ended.
func exitOf(p *proc.Process) runtime.Exit {
	st := p.Status()
	return runtime.Exit{Unknown: !st.Known, Code: st.Code, Signal: st.Signal, At: st.At}
}

// finish waits for the leader, ends the rest of the cgroup, waits for it
// to empty, and only then says the sandbox is done. It gives up when the
// watcher closes: the daemon is leaving, and its sandboxes outlive it.
func (h *handle) finish(closed <-chan struct{}) {
	exit := runtime.Exit{Unknown: true, At: time.Now()}
	if h.p != nil {
		select {
		case <-h.p.Done():
		case <-closed:
			return
		}
		exit = h.leaderExit()
	} else if e, ok := h.recordedExit(); ok {
		exit.Unknown, exit.Code, exit.Signal = false, e.Code, e.Signal
	}
	// A lone leader's group is empty by the time its pidfd says it
	// exited (the kernel leaves the cgroup before it notifies): read it.
	// Only a group that outlives its leader is watched, from here on (a
	// watch made at the start would cost every create an
	// inotify_add_watch on cgroupfs, which waits on the kernel's cgroup
	// locks while other groups are made: 0.8 s each with 500 at once).
	// The kill comes first, so the rest dies while the watch is made;
	// the watch reads the group again once it is in place, so an
	// emptying in between is not missed.
	if populated, err := h.g.Populated(); err != nil || populated {
		// Without inotify or a working kill there is nothing to wait on:
		// Delete then finds the group busy and says so.
		if empty, err := h.g.End(); err == nil {
			select {
			case <-empty:
			case <-closed:
				return
			}
		}
	}
	// An OOM kill anywhere in the sandbox explains its end (the kernel
	// kills with SIGKILL), even when the leader was not the process it
	// chose.
	if (exit.Unknown || exit.Signal == unix.SIGKILL || exit.Code == 128+int(unix.SIGKILL)) && h.g.OOMKills() > 0 {
		exit.OOMKilled = true
	}
	h.end.End(exit)
	if h.init != nil {
		// Its pasta, outside the cgroup: killed now, not waited for.
		go h.w.KillMarked(h.id.Marker)
	}
}

// Adopt re-pins a child of an earlier daemon, and its cgroup. A child
// that is gone while its cgroup still exists comes back as a handle that
// is done once the cgroup is emptied, so that Delete removes it.
func (n *Runtime) Adopt(ctx context.Context, st runtime.HandleState) (runtime.Handle, error) {
	s, err := decode(st)
	if err != nil {
		return nil, err
	}
	var g *cgroup.Group
	if s.Cgroup != nil && n.Cgroups != nil {
		g, err = n.Cgroups.Open(*s.Cgroup, s.Marker)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			g = nil
		case err != nil:
			return nil, fmt.Errorf("%w: %v", runtime.ErrNotOurs, err)
		}
	}
	p, err := n.Watcher.Adopt(s.Identity)
	switch {
	case errors.Is(err, proc.ErrNotFound), errors.Is(err, proc.ErrExited):
		if g != nil {
			if s.Control != "" {
				n.endRemains(g, s.Marker) // an isolated sandbox's pasta outlives its init
			}
			return n.newHandle(nil, s.Identity, g, s), nil
		}
		return nil, fmt.Errorf("%w: %v", runtime.ErrGone, err)
	case errors.Is(err, proc.ErrIdentity):
		return nil, fmt.Errorf("%w: %v", runtime.ErrNotOurs, err)
	case err != nil:
		return nil, err
	}
	return n.newHandle(p, s.Identity, g, s), nil
}

// PID returns the pid a native handle's state names, for tools that read
// records from outside the daemon. It never returns a pid below 1.
func PID(st runtime.HandleState) (int, error) {
	s, err := decode(st)
	return s.PID, err
}

// decode reads a handle's state, of either version.
func decode(st runtime.HandleState) (state, error) {
	var s state
	if st.Version != stateProcess && st.Version != stateCgroup {
		return s, fmt.Errorf("%w: native handle version %d, want %d or %d", runtime.ErrState, st.Version, stateProcess, stateCgroup)
	}
	if err := json.Unmarshal(st.Data, &s); err != nil {
		return s, fmt.Errorf("%w: native handle: %v", runtime.ErrState, err)
	}
	if s.PID <= 0 {
		return s, fmt.Errorf("%w: native handle: no pid", runtime.ErrState)
	}
	if (st.Version == stateCgroup) != (s.Cgroup != nil) {
		return s, fmt.Errorf("%w: native handle version %d with cgroup %v", runtime.ErrState, st.Version, s.Cgroup != nil)
	}
	return s, nil
}

// Sweep kills every process that carries one of markers, each verified
// through its pidfd first, in one pass over /proc, and removes their
// cgroups.
func (n *Runtime) Sweep(ctx context.Context, markers []string, _ runtime.Owned) error {
	_, err := proc.KillMarked(markers...)
	return errors.Join(err, n.Cgroups.Sweep(ctx, markers))
}

// Prune removes the empty cgroups of sandboxes that a record names but
// that are not live. A cgroup directory no record names is logged and
// left: anyone who may write in the subtree could have made it.
func (n *Runtime) Prune(ctx context.Context, keep []string, own runtime.Owned) error {
	return n.Cgroups.RemoveEmpty(keep, own.Known)
}

func (h *handle) State() runtime.HandleState {
	s := state{Identity: h.id, Port: h.port, Workspace: h.Host}
	if h.init != nil {
		s.Control = h.init.Control
	}
	v := stateProcess
	if h.g != nil {
		ref := h.g.Ref()
		s.Cgroup = &ref
		v = stateCgroup
	}
	b, _ := json.Marshal(s)
	return runtime.HandleState{Version: v, Data: b}
}

// PortEndpoint: a process shares the host's network, so any port it
// listens on is the loopback's; so is every other program's. It is
// reached only while a process of the sandbox (in its cgroup; without
// one, carrying its marker) holds a socket listening on it: never the
// daemon's port, another sandbox's or another program's.
//
// An isolated sandbox's network is its own: any listener in it is the
// sandbox's, and it is reached through DialPort only (its Endpoint is
// the zero one).
func (h *handle) PortEndpoint(_ context.Context, port int) (runtime.Endpoint, error) {
	if h.init != nil {
		ok, err := h.portListening(port)
		if err == nil && !ok {
			err = fmt.Errorf("%w: nothing in it listens on port %d", runtime.ErrNotListening, port)
		}
		return runtime.Endpoint{}, err
	}
	var pids []int
	if h.g != nil {
		var err error
		if pids, err = h.g.PIDs(); err != nil {
			return runtime.Endpoint{}, fmt.Errorf("read the sandbox's processes: %w", err)
		}
	} else {
		pids = proc.MarkedPIDs(h.id.Marker)
	}
	ok, err := proc.Listening(port, pids)
	if err != nil {
		return runtime.Endpoint{}, fmt.Errorf("read the listening sockets: %w", err)
	}
	if !ok {
		return runtime.Endpoint{}, fmt.Errorf("%w: nothing in it listens on port %d", runtime.ErrNotListening, port)
	}
	return runtime.Loopback(port), nil
}

// Endpoint: the leased port on the loopback.
func (h *handle) Endpoint() runtime.Endpoint {
	if h.port == 0 {
		return runtime.Endpoint{}
	}
	return runtime.Loopback(h.port)
}

func (h *handle) Done() <-chan struct{} {
	if h.g == nil {
		return h.p.Done()
	}
	return h.end.Done()
}

// OnDone runs f once the sandbox is done, with no goroutine waiting for
// it meanwhile. Like Done, it never fires after the watcher has closed.
func (h *handle) OnDone(f func()) {
	if h.g == nil {
		h.p.OnExit(f)
		return
	}
	h.end.OnDone(f)
}

func (h *handle) Exit() runtime.Exit {
	if h.g == nil {
		return h.leaderExit()
	}
	return h.end.Exit()
}

// Stop sends SIGTERM to the process group, waits up to grace, then kills
// the cgroup (everything in it, however it was started) and the group.
func (h *handle) Stop(ctx context.Context, grace time.Duration) error {
	if h.g == nil {
		_, err := h.p.Stop(ctx, grace)
		h.execs.kill()
		return err
	}
	if grace > 0 && h.p != nil {
		if err := h.p.SignalGroup(unix.SIGTERM); err != nil && !errors.Is(err, proc.ErrExited) {
			return err
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.end.Done():
			return nil
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := h.g.Kill(); err != nil {
		return err
	}
	if h.p != nil {
		if err := h.p.SignalGroup(unix.SIGKILL); err != nil && !errors.Is(err, proc.ErrExited) {
			return err
		}
	}
	return h.wait(ctx)
}

func (h *handle) wait(ctx context.Context) error {
	select {
	case <-h.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delete removes the sandbox's cgroup. Without one there is nothing to
// release: the process group is gone with its leader (proc kills what is
// left of it) and proc closes the pidfd.
func (h *handle) Delete(ctx context.Context) error {
	if h.g == nil {
		return nil
	}
	return h.g.Remove()
}
