package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

func newMarker(id string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return id + "." + hex.EncodeToString(b)
}

// Create validates req, leases a port, writes the sandbox directory and
// starts the workload. It returns the sandbox in state starting; readiness
// is probed in the background. On any error nothing is left behind: no
// process, no port lease, no directory.
func (s *Supervisor) Create(ctx context.Context, req CreateRequest) (sb Sandbox, err error) {
	tr := runtime.NewTrace()
	defer func() { s.stats.created(err, tr) }()
	e, snap, rt, err := s.prepare(req)
	if err != nil {
		return Sandbox{}, err
	}
	if err := s.reserve(e); err != nil {
		return Sandbox{}, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	tr.Mark(StepCheck)

	var undo undoList
	defer func() {
		if err != nil {
			undo.run()
			s.mu.Lock()
			delete(s.sandboxes, e.id)
			s.mu.Unlock()
		}
	}()
	caps := rt.Capabilities()
	if caps.LocalPort {
		port, err := s.ports.lease(e.id)
		if err != nil {
			return Sandbox{}, err
		}
		undo.add(func() { s.ports.release(port, e.id) })
		e.info.Port = port
	}
	tr.Mark(StepLease)
	env, err := s.makeDirectory(e, req.Env, snap, caps, &undo)
	if err != nil {
		return Sandbox{}, err
	}
	tr.Mark(StepDirectory)
	spec, err := s.spec(e, e.marker, e.info.Port, childenv.List(env), snap, req.Labels, e.info.Resources)
	if err != nil {
		return Sandbox{}, err
	}
	h, err := rt.Start(runtime.WithTrace(context.WithoutCancel(ctx), tr), spec)
	if err != nil {
		return Sandbox{}, startError(err)
	}
	undo.add(func() { s.abandon(e.id, h) })
	tr.Mark(StepStart)
	e.info.Endpoint, e.info.Isolation = h.Endpoint(), isolationOf(h)
	if err := s.writeRecord(e.id, s.toRecord(e, e.info, h.State()), true); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	tr.Mark(StepRecord)

	s.mu.Lock()
	e.handle = h
	e.launched = e.info.CreatedAt
	e.pending = false
	info := e.info
	s.events.publish(Event{Type: EventCreated, Time: info.CreatedAt, Sandbox: info})
	s.mu.Unlock()
	s.log.Info("sandbox created", "sandbox", e.id, "runtime", info.Runtime, "port", info.Port, "labels", info.Labels)
	s.watch(e, h, e.startup)
	tr.Mark(StepPublish)
	return info, nil
}

// prepare checks req and returns the entry it asks for (pending, in
// state starting), the snapshot it runs and its runtime; nothing is
// reserved yet.
func (s *Supervisor) prepare(req CreateRequest) (*sandbox, snapshot.Snapshot, runtime.Runtime, error) {
	if err := req.Validate(); err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	snap, err := s.resolve(req)
	if err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	rt, _ := s.opts.Runtimes.Get(snap.Runtime)
	res, err := req.Limits.over(s.opts.Limits)
	if err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	if res, err = s.enforceable(rt, snap.Runtime, res); err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	if len(req.Volumes) > 0 && !rt.Capabilities().Mounts {
		return nil, snapshot.Snapshot{}, nil, field.Errorf(field.Volumes, "cannot be mounted by the %s runtime here; use a snapshot of a runtime that mounts them (docker, or native where sandboxes are isolated)", snap.Runtime)
	}
	if err := s.checkMounts(req.Volumes); err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	now := s.clock()
	autoStop := time.Duration(s.autoStop.Load())
	if req.AutoStopInterval != nil {
		autoStop = *req.AutoStopInterval
	}
	var autoDelete *time.Duration
	if req.AutoDeleteInterval != nil && *req.AutoDeleteInterval >= 0 {
		d := *req.AutoDeleteInterval
		autoDelete = &d
	}
	e := &sandbox{
		pending:   true,
		id:        req.Name,
		dir:       filepath.Join(s.opts.Root, req.Name),
		marker:    newMarker(req.Name),
		grace:     *snap.StopGrace,
		readyPath: snap.ReadyPath,
		startup:   snap.StartupTimeout,
		info: Sandbox{
			ID: req.Name, Runtime: snap.Runtime, Labels: cloneMap(req.Labels),
			Snapshot: snap.Name, Public: req.Public, CreatedAt: now, UpdatedAt: now,
			LastActivityAt: now, AutoStopInterval: autoStop, AutoDeleteInterval: autoDelete,
			Extensions: req.Extensions.clone(), Resources: res, Volumes: slices.Clone(req.Volumes),
			Network: runtime.Network{BlockAll: req.Network.BlockAll, AllowList: slices.Clone(req.Network.AllowList)},
		},
	}
	if err := move(&e.info, Starting); err != nil {
		return nil, snapshot.Snapshot{}, nil, err
	}
	return e, snap, rt, nil
}

// reserve takes e's name in the registry, e invisible while pending.
func (s *Supervisor) reserve(e *sandbox) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if other, taken := s.sandboxes[e.id]; taken {
		if other.pending || other.info.State.Live() {
			return fmt.Errorf("%w: %s is taken by a sandbox that is %s; choose another name, or delete that one first", ErrConflict, e.id, other.info.State)
		}
		return fmt.Errorf("%w: %s is taken by a sandbox that is %s (it keeps its name until it is deleted); start it again, or delete it first", ErrConflict, e.id, other.info.State)
	}
	s.sandboxes[e.id] = e
	return nil
}

// makeDirectory makes e's directory with its variables (the snapshot's,
// then the request's, through the daemon's policy) and its intent
// record, and returns the variables. The directory is built under a
// staging name that proves it is ours (see rootFS.tempName) and appears
// under its own name, complete with its intent record, in one rename
// that never replaces anything: a daemon that dies on the way leaves
// either a staging directory it can prove it made, or a sandbox
// directory with a record.
func (s *Supervisor) makeDirectory(e *sandbox, reqEnv map[string]string, snap snapshot.Snapshot, caps runtime.Capabilities, undo *undoList) (map[string]string, error) {
	made, err := s.takeSpare()
	if err != nil {
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	undo.add(func() {
		if err := s.fs.removeAll(made); err != nil {
			s.log.Error("remove directory of a failed create", "sandbox", e.id, "err", err)
		}
	})
	policy := s.opts.Env
	if caps.Isolation {
		policy.Base = nil // the host's PATH, HOME, … mean nothing there
	}
	if len(snap.Env) > 0 {
		withSnap := maps.Clone(snap.Env)
		maps.Copy(withSnap, reqEnv)
		reqEnv = withSnap
	}
	// The variables only: the runtime adds the sandbox's facts (its id,
	// port, workspace) as its workload sees them.
	env := policy.Build(reqEnv, nil)
	// The env file and the intent record are not fsynced: they must exist
	// before the workload does, so that a daemon that dies mid-create
	// leaves a record whose marker finds the child. Durability against
	// power loss comes with the committed record, whose directory fsync
	// covers them too; a power loss kills the child anyway.
	if err := withIndented(env, func(b []byte) error { return s.fs.fill(made+"/"+EnvFile, b) }); err != nil {
		return nil, fmt.Errorf("write %s: %w", EnvFile, err)
	}
	if err := withIndented(s.toRecord(e, e.info, runtime.HandleState{}), func(b []byte) error { return s.fs.fill(made+"/"+RecordFile, b) }); err != nil {
		return nil, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	if err := s.fs.RenameNoReplace(made, e.id); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s: the root holds an entry of that name that is not a sandbox; it is left alone", ErrConflict, e.id)
		}
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	made = e.id // the undo removes it under its own name now
	return env, nil
}

// abandon stops and releases the workload of a create that failed after
// it started.
func (s *Supervisor) abandon(id string, h runtime.Handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Stop(ctx, 0); err != nil {
		s.log.Error("stop the workload of a failed create", "sandbox", id, "err", err)
	}
	if err := h.Delete(ctx); err != nil {
		s.log.Error("runtime delete after a failed create", "sandbox", id, "err", err)
	}
}

// undoList is what a create has done so far, undone last first when it
// fails.
type undoList []func()

func (u *undoList) add(f func()) { *u = append(*u, f) }

func (u undoList) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// spec is what runtime gets to start e's workload under marker: the
// sandbox's facts and what its snapshot, variables, labels, limits and
// volumes say.
func (s *Supervisor) spec(e *sandbox, marker string, port int, vars []string, snap snapshot.Snapshot, labels map[string]string, res runtime.Resources) (runtime.Spec, error) {
	mounts, err := s.mounts(e.info.Volumes)
	if err != nil {
		return runtime.Spec{}, err
	}
	return runtime.Spec{
		ID: e.id, Vars: vars, Dir: e.dir, Workspace: filepath.Join(e.dir, WorkspaceDir),
		Stdout: filepath.Join(e.dir, logcap.Stdout), Stderr: filepath.Join(e.dir, logcap.Stderr),
		Port: port, Marker: marker, Seal: s.fs.seal(marker), Command: snap.Command, Image: snap.Image,
		Labels: cloneMap(labels), Resources: res, Mounts: mounts,
		Isolation: snap.Isolation, Binds: binds(snap.Mounts), Network: e.info.Network,
	}, nil
}

// binds are a snapshot's mounts as a runtime takes them.
func binds(ms []snapshot.Mount) []runtime.Bind {
	var out []runtime.Bind
	for _, m := range ms {
		out = append(out, runtime.Bind{Source: m.Source, Target: m.Target, ReadOnly: !m.ReadWrite})
	}
	return out
}

// isolationOf is what h says of its isolation; a handle that says
// nothing shares the host.
func isolationOf(h runtime.Handle) string {
	if i, ok := h.(runtime.Isolated); ok {
		return i.Isolation()
	}
	return runtime.IsolationOff
}

// startError is a runtime's refusal to start, as the supervisor says it:
// a network policy or an isolation the sandbox cannot have is the
// request's fault.
func startError(err error) error {
	if errors.Is(err, runtime.ErrNetworkUnsupported) || errors.Is(err, runtime.ErrIsolationUnsupported) {
		return invalid("%v", err)
	}
	return fmt.Errorf("start workload: %w", err)
}

// enforceable is the part of r that runtime rt (called name) enforces.
// A limit it cannot enforce is an error wrapping ErrLimitsUnsupported
// unless the daemon is told to ignore such limits.
func (s *Supervisor) enforceable(rt runtime.Runtime, name string, r runtime.Resources) (runtime.Resources, error) {
	if r.IsZero() {
		return r, nil
	}
	got, err := runtime.Resources{}, fmt.Errorf("%w: the %s runtime enforces no limits", ErrLimitsUnsupported, name)
	if l, ok := rt.(runtime.Limiter); ok {
		got, err = l.Enforceable(r)
	}
	if err != nil && !s.opts.IgnoreUnsupportedLimits {
		return r, err
	}
	return got, nil
}

// cloneMap copies m; nil becomes an empty map.
func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}
