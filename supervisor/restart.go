package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Start starts a stopped sandbox again in place: the same
// name, directory and workspace (its files kept), labels, snapshot,
// variables and limits, with a fresh workload (a new marker, and a new
// port where the runtime takes one). A sandbox that is starting or
// started is returned as it is. Readiness is probed in the background, as
// after a create. On error the sandbox stays stopped and nothing of the
// new workload remains.
//
// It is long because a start is one ordered sequence under the op lock
// (intent, lease, workload, record, commit), each step undone if a later
// one fails.
func (s *Supervisor) Start(ctx context.Context, id string) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	sb, current := e.info, s.sandboxes[id] == e
	s.mu.Unlock()
	switch {
	case !current:
		return Sandbox{}, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	case sb.State.Live():
		return sb, nil
	}
	next := sb // what it will be once its workload runs
	if err := move(&next, Starting); err != nil {
		return Sandbox{}, err
	}
	rt, ok := s.opts.Runtimes.Get(sb.Runtime)
	if !ok {
		return Sandbox{}, fmt.Errorf("%w: %q: this daemon no longer runs it", ErrUnsupportedRuntime, sb.Runtime)
	}
	snap, err := s.resolve(CreateRequest{Runtime: sb.Runtime, Snapshot: sb.Snapshot})
	if err != nil {
		return Sandbox{}, err
	}
	res, err := s.enforceable(rt, sb.Runtime, sb.Resources)
	if err != nil {
		return Sandbox{}, err
	}
	env, err := s.envOf(e)
	if err != nil {
		return Sandbox{}, err
	}
	vars := childenv.List(env)
	// The workspace must still be the directory the daemon made: one
	// replaced by a link while the sandbox was stopped would have the
	// workload (its directory, a container's bind, the toolbox) work
	// wherever the link leads.
	if fi, err := s.fs.Lstat(id + "/" + WorkspaceDir); err != nil || !fi.IsDir() {
		return Sandbox{}, fmt.Errorf("%w: the workspace of %s is not a directory of its own (a link?); it is left as it is and the sandbox stays stopped", ErrTampered, Clip(id, MaxQuoted))
	}

	port := 0
	if rt.Capabilities().LocalPort {
		if port, err = s.ports.leaseAgain(id, sb.Port); err != nil {
			return Sandbox{}, err
		}
	}
	release := func() { s.ports.release(port, id) }
	// The intent first: a daemon that dies before the new workload is
	// recorded finds the record stopped with the marker it may have run
	// under, sweeps that marker and keeps the sandbox (and its files).
	marker := newMarker(id)
	intent := s.toRecord(e, sb, s.handleState(e))
	intent.StartingMarker = marker
	if err := s.writeRecord(id, intent, false); err != nil {
		release()
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	spec, err := s.spec(e, marker, port, vars, snap, sb.Labels, res)
	var h runtime.Handle
	if err == nil {
		h, err = rt.Start(context.WithoutCancel(ctx), spec)
	}
	if err != nil {
		release()
		if werr := s.writeRecord(id, s.toRecord(e, sb, s.handleState(e)), false); werr != nil {
			s.log.Error("persist sandbox record", "sandbox", id, "err", werr)
		}
		return Sandbox{}, startError(err)
	}

	now := s.clock()
	next.Port, next.Endpoint, next.Resources, next.Isolation = port, h.Endpoint(), res, isolationOf(h)
	next.StartedAt, next.StoppedAt, next.ErrorReason, next.StopReason = time.Time{}, time.Time{}, "", ""
	next.UpdatedAt, next.LastActivityAt, next.LaunchedAt = now, now, now
	s.mu.Lock()
	e.marker, e.handle, e.launched = marker, h, now
	s.mu.Unlock()
	if err := s.writeRecord(id, s.toRecord(e, next, h.State()), true); err != nil {
		s.log.Error("persist sandbox record", "sandbox", id, "err", err)
	}
	s.mu.Lock()
	e.setInfoLocked(next)
	s.events.publish(Event{Type: EventStarting, Time: now, Sandbox: next})
	s.mu.Unlock()
	s.log.Info("sandbox starting again", "sandbox", id, "runtime", sb.Runtime, "port", port)
	s.watch(e, h, e.startup)
	return next, nil
}
