// Package native is the runtime that runs each sandbox as a detached child
// process group of the daemon, pinned by a pidfd and identified by a marker
// (package proc does the work).
package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// stateVersion is the version of the handle state this runtime writes: a
// proc.Identity as JSON.
const stateVersion = 1

// Runtime runs argv once per sandbox, supervised by a proc.Watcher.
type Runtime struct {
	Watcher *proc.Watcher
	Argv    []string
}

var _ runtime.Runtime = (*Runtime)(nil)

type handle struct{ p *proc.Process }

// Start spawns the child.
func (n *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	p, err := n.Watcher.Spawn(proc.Spec{
		Argv:   n.Argv,
		Env:    spec.Env,
		Dir:    spec.Workspace,
		Stdout: spec.Stdout,
		Stderr: spec.Stderr,
		Marker: spec.Marker,
	})
	if err != nil {
		return nil, err
	}
	return handle{p}, nil
}

// Adopt re-pins a child of an earlier daemon from its proc.Identity.
func (n *Runtime) Adopt(ctx context.Context, state runtime.State) (runtime.Handle, error) {
	id, err := identity(state)
	if err != nil {
		return nil, err
	}
	p, err := n.Watcher.Adopt(id)
	switch {
	case errors.Is(err, proc.ErrNotFound), errors.Is(err, proc.ErrExited):
		return nil, fmt.Errorf("%w: %v", runtime.ErrGone, err)
	case errors.Is(err, proc.ErrIdentity):
		return nil, fmt.Errorf("%w: %v", runtime.ErrNotOurs, err)
	case err != nil:
		return nil, err
	}
	return handle{p}, nil
}

// PID returns the pid a native handle's state names, for tools that read
// records from outside the daemon. It never returns a pid below 1.
func PID(state runtime.State) (int, error) {
	id, err := identity(state)
	return id.PID, err
}

// identity decodes a handle's state.
func identity(state runtime.State) (proc.Identity, error) {
	if state.Version != stateVersion {
		return proc.Identity{}, fmt.Errorf("%w: native handle version %d, want %d", runtime.ErrState, state.Version, stateVersion)
	}
	var id proc.Identity
	if err := json.Unmarshal(state.Data, &id); err != nil {
		return proc.Identity{}, fmt.Errorf("%w: native handle: %v", runtime.ErrState, err)
	}
	if id.PID <= 0 {
		return proc.Identity{}, fmt.Errorf("%w: native handle: no pid", runtime.ErrState)
	}
	return id, nil
}

// Sweep kills every process that carries one of markers, each verified
// through its pidfd first, in one pass over /proc.
func (n *Runtime) Sweep(ctx context.Context, markers []string) {
	proc.KillMarked(markers...)
}

func (h handle) State() runtime.State {
	b, _ := json.Marshal(h.p.Identity())
	return runtime.State{Version: stateVersion, Data: b}
}

func (h handle) Done() <-chan struct{} { return h.p.Done() }

func (h handle) Exit() runtime.Exit {
	st := h.p.Status()
	return runtime.Exit{Unknown: !st.Known, Code: st.Code, Signal: st.Signal}
}

func (h handle) Stop(ctx context.Context, grace time.Duration) error {
	_, err := h.p.Stop(ctx, grace)
	return err
}

// Delete has nothing to release: the process group is gone with its
// leader (proc kills what is left of it) and proc closes the pidfd.
func (h handle) Delete(ctx context.Context) error { return nil }
