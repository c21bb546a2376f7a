package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// NativeRuntime runs each sandbox as a detached child process of argv,
// supervised by a proc.Watcher.
type NativeRuntime struct {
	Watcher *proc.Watcher
	Argv    []string
}

type nativeHandle struct{ p *proc.Process }

// Start spawns the child.
func (n *NativeRuntime) Start(ctx context.Context, spec Spec) (Handle, error) {
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
	return nativeHandle{p}, nil
}

// Adopt re-pins a child of an earlier daemon from its proc.Identity.
func (n *NativeRuntime) Adopt(ctx context.Context, state json.RawMessage) (Handle, error) {
	var id proc.Identity
	if err := json.Unmarshal(state, &id); err != nil {
		return nil, fmt.Errorf("decode native handle: %w", err)
	}
	if id.PID <= 0 {
		return nil, fmt.Errorf("decode native handle: no pid")
	}
	p, err := n.Watcher.Adopt(id)
	switch {
	case errors.Is(err, proc.ErrNotFound), errors.Is(err, proc.ErrExited):
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	case errors.Is(err, proc.ErrIdentity):
		return nil, fmt.Errorf("%w: %v", ErrNotOurs, err)
	case err != nil:
		return nil, err
	}
	return nativeHandle{p}, nil
}

// Sweep kills every process that carries one of markers, each verified
// through its pidfd first, in one pass over /proc.
func (n *NativeRuntime) Sweep(ctx context.Context, markers []string) {
	proc.KillMarked(markers...)
}

func (h nativeHandle) State() json.RawMessage {
	b, _ := json.Marshal(h.p.Identity())
	return b
}

func (h nativeHandle) Done() <-chan struct{} { return h.p.Done() }

func (h nativeHandle) ExitReason() string { return h.p.Status().String() }

func (h nativeHandle) Stop(ctx context.Context, grace time.Duration) error {
	_, err := h.p.Stop(ctx, grace)
	return err
}
