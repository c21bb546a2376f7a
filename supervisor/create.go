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
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
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
	if err := req.Validate(); err != nil {
		return Sandbox{}, err
	}
	snap, err := s.resolve(req)
	if err != nil {
		return Sandbox{}, err
	}
	req.Runtime = snap.Runtime
	rt, _ := s.opts.Runtimes.Get(req.Runtime)
	res, err := req.Limits.over(s.opts.Limits)
	if err != nil {
		return Sandbox{}, err
	}
	if res, err = s.enforceable(rt, req.Runtime, res); err != nil {
		return Sandbox{}, err
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
			ID: req.Name, Runtime: req.Runtime, Labels: cloneMap(req.Labels),
			Snapshot: snap.Name, Public: req.Public, CreatedAt: now, UpdatedAt: now,
			LastActivityAt: now, AutoStopInterval: autoStop, AutoDeleteInterval: autoDelete,
			Extensions: req.Extensions.clone(), Resources: res,
		},
	}
	if err := move(&e.info, Starting); err != nil {
		return Sandbox{}, err
	}
	// Reserve the name.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Sandbox{}, ErrClosed
	}
	if _, taken := s.sandboxes[req.Name]; taken {
		s.mu.Unlock()
		return Sandbox{}, fmt.Errorf("%w: %s (a sandbox keeps its name, also while stopped, until it is deleted)", ErrConflict, req.Name)
	}
	s.sandboxes[req.Name] = e
	s.mu.Unlock()
	e.op.Lock()
	defer e.op.Unlock()
	tr.Mark(StepCheck)

	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			s.mu.Lock()
			delete(s.sandboxes, req.Name)
			s.mu.Unlock()
		}
	}()

	caps := rt.Capabilities()
	port := 0
	if caps.LocalPort {
		if port, err = s.ports.lease(req.Name); err != nil {
			return Sandbox{}, err
		}
		undo = append(undo, func() { s.ports.release(port, req.Name) })
		e.info.Port = port
	}
	tr.Mark(StepLease)

	// The directory is built under a staging name that proves it is ours
	// (see rootFS.tempName) and appears under its own name, complete with
	// its intent record, in one rename that never replaces anything: a
	// daemon that dies on the way leaves either a staging directory it
	// can prove it made, or a sandbox directory with a record.
	made, err := s.takeSpare()
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox directory: %w", err)
	}
	undo = append(undo, func() {
		if err := s.fs.removeAll(made); err != nil {
			s.log.Error("remove directory of a failed create", "sandbox", req.Name, "err", err)
		}
	})
	policy := s.opts.Env
	if caps.Isolation {
		policy.Base = nil // the host's PATH, HOME, … mean nothing there
	}
	reqEnv := req.Env
	if len(snap.Env) > 0 {
		reqEnv = maps.Clone(snap.Env)
		maps.Copy(reqEnv, req.Env)
	}
	// The variables only: the runtime adds the sandbox's facts (its id,
	// port, workspace) as its workload sees them.
	env := policy.Build(reqEnv, nil)
	// The env file and the intent record are not fsynced: they must exist
	// before the workload does, so that a daemon that dies mid-create
	// leaves a record whose marker finds the child. Durability against
	// power loss comes with the committed record below, whose directory
	// fsync covers them too; a power loss kills the child anyway.
	if err := withIndented(env, func(b []byte) error { return s.fs.fill(made+"/"+EnvFile, b) }); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", EnvFile, err)
	}
	if err := withIndented(s.toRecord(e, e.info, runtime.HandleState{}), func(b []byte) error { return s.fs.fill(made+"/"+RecordFile, b) }); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	if err := s.fs.RenameNoReplace(made, req.Name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Sandbox{}, fmt.Errorf("%w: %s: the root holds an entry of that name that is not a sandbox; it is left alone", ErrConflict, req.Name)
		}
		return Sandbox{}, fmt.Errorf("create sandbox directory: %w", err)
	}
	made = req.Name
	tr.Mark(StepDirectory)
	h, err := rt.Start(runtime.WithTrace(context.WithoutCancel(ctx), tr), s.spec(e, e.marker, port, childenv.List(env), snap, req.Labels, res))
	if err != nil {
		return Sandbox{}, fmt.Errorf("start workload: %w", err)
	}
	undo = append(undo, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Stop(stopCtx, 0); err != nil {
			s.log.Error("stop the workload of a failed create", "sandbox", req.Name, "err", err)
		}
		if err := h.Delete(stopCtx); err != nil {
			s.log.Error("runtime delete after a failed create", "sandbox", req.Name, "err", err)
		}
	})
	tr.Mark(StepStart)
	e.info.Endpoint = h.Endpoint()
	if err := s.writeRecord(e.id, s.toRecord(e, e.info, h.State()), true); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	tr.Mark(StepRecord)

	s.mu.Lock()
	e.handle = h
	e.launched = now
	e.pending = false
	info := e.info
	s.events.publish(Event{Type: EventCreated, Time: now, Sandbox: info})
	s.mu.Unlock()
	s.log.Info("sandbox created", "sandbox", req.Name, "runtime", req.Runtime, "port", port, "labels", req.Labels)
	s.watch(e, h, e.startup)
	tr.Mark(StepPublish)
	return info, nil
}

// spec is what runtime gets to start e's workload under marker: the
// sandbox's facts and what its snapshot, variables, labels and limits say.
func (s *Supervisor) spec(e *sandbox, marker string, port int, vars []string, snap snapshot.Snapshot, labels map[string]string, res runtime.Resources) runtime.Spec {
	return runtime.Spec{
		ID: e.id, Vars: vars, Dir: e.dir, Workspace: filepath.Join(e.dir, WorkspaceDir),
		Stdout: filepath.Join(e.dir, logcap.Stdout), Stderr: filepath.Join(e.dir, logcap.Stderr),
		Port: port, Marker: marker, Seal: s.fs.seal(marker), Command: snap.Command, Image: snap.Image,
		Labels: cloneMap(labels), Resources: res,
	}
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
