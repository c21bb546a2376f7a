package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// watch starts the goroutine that follows a live workload: its logs'
// cap and readiness for up to timeout (measured on the real clock); its
// exit is then handled when it comes (the handle's OnDone). After Close it
// starts nothing: the workload outlives the daemon.
func (s *Supervisor) watch(e *sandbox, h runtime.Handle, timeout time.Duration) {
	if !s.track() {
		return
	}
	go func() {
		defer s.bg.Done()
		// Off the caller's path (a create answers sooner), under the op
		// lock: after the caller's, and never after a stop's release.
		// Whatever the workload wrote before is capped and dated now.
		e.op.Lock()
		s.mu.Lock()
		live := e.handle == h && e.info.State.Live()
		s.mu.Unlock()
		if live {
			s.logs.Watch(e.id)
		}
		e.op.Unlock()
		s.awaitReady(e, h, timeout)
		// Then no goroutine waits while the workload runs (a live
		// sandbox's only cost is its state): the exit is handled when it
		// comes, unless the supervisor has closed by then.
		h.OnDone(func() {
			if !s.track() {
				return
			}
			defer s.bg.Done()
			s.exited(e, h)
		})
	}()
}

// awaitReady probes the readiness URL until it answers 2xx, the workload
// exits, the deadline passes or the supervisor closes.
func (s *Supervisor) awaitReady(e *sandbox, h runtime.Handle, timeout time.Duration) {
	s.mu.Lock()
	state, url := e.info.State, e.info.Endpoint.URL(e.readyPath)
	s.mu.Unlock()
	if state != Starting {
		return
	}
	// Whatever the outcome, the start is over: spares made now do not
	// compete with it.
	defer s.refillSpares()
	ctx, cancel := context.WithTimeout(s.lifetime, max(timeout, 0))
	defer cancel()
	// The workload's end ends the probe, with no goroutine waiting for it
	// meanwhile (a burst's starting sandboxes each had one). The hook
	// stays until the workload ends, and then cancels what is over.
	h.OnDone(cancel)
	err := s.probe.Await(ctx, url, probe.Readiness)
	switch {
	case err == nil:
		s.transition(e, h, func(sb *Sandbox) (string, bool) {
			if sb.State != Starting || move(sb, Started) != nil {
				return "", false // stopped meanwhile
			}
			sb.StartedAt = s.clock()
			if !e.launched.IsZero() { // change runs under mu, which guards launched
				s.stats.readied(sb.Runtime, sb.StartedAt.Sub(e.launched))
			}
			return EventStarted, true
		})
	case s.lifetime.Err() != nil, isDone(h.Done()):
	default:
		// Say what the probe got: the first thing a user needs to fix a
		// snapshot (a wrong ready path answers 404, a wrong port refuses).
		reason := ReasonStartupTimeout
		var nr *probe.NotReadyError
		if errors.As(err, &nr) {
			reason += ": GET " + pathOf(url) + " " + nr.Got()
		}
		s.log.Warn("sandbox not ready before the startup deadline", "sandbox", e.id, "url", url, "reason", reason)
		s.stop(e, StopStartupFailed, reason, 0)
	}
}

// pathOf is a URL's path and query.
func pathOf(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.RequestURI()
	}
	return raw
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// transition applies change to e under its op lock if the handle is still
// e's, persists the record and publishes the named event.
func (s *Supervisor) transition(e *sandbox, h runtime.Handle, change func(*Sandbox) (event string, ok bool)) {
	e.op.Lock()
	defer e.op.Unlock()
	s.transitionHoldingOp(e, h, true, change)
}

// transitionHoldingOp is transition for a caller that holds e.op; it
// reports whether it committed. durable: see commitAs.
func (s *Supervisor) transitionHoldingOp(e *sandbox, h runtime.Handle, durable bool, change func(*Sandbox) (event string, ok bool)) bool {
	s.mu.Lock()
	if e.handle != h {
		s.mu.Unlock()
		return false
	}
	next := e.info
	ev, ok := change(&next)
	if !ok {
		s.mu.Unlock()
		return false
	}
	next.UpdatedAt = s.clock()
	s.mu.Unlock()
	s.commitAs(e, next, ev, durable)
	return true
}

// commit persists next as e's state, durably, and then makes it visible
// with event ev (if not empty). Callers hold e.op. A record that cannot be
// written is logged: the in-memory state still reflects the truth about
// the process.
func (s *Supervisor) commit(e *sandbox, next Sandbox, ev string) {
	s.commitAs(e, next, ev, true)
}

// commitAs is commit, with the record fsynced before the event only when
// durable. Without, the event goes first and the record is written (in
// full, renamed into place) right after, still under e.op, so that the
// next operation on e reads it: what a daemon that died between the two
// finds is a live record whose workload is gone, which it marks stopped
// anyway; only the exit's details would be lost.
func (s *Supervisor) commitAs(e *sandbox, next Sandbox, ev string, durable bool) {
	if durable {
		s.persist(e, next, true)
	}
	s.mu.Lock()
	e.setInfoLocked(next)
	if ev != "" {
		s.events.publish(Event{Type: ev, Time: next.UpdatedAt, Sandbox: next})
	}
	s.mu.Unlock()
	if ev != "" {
		// The publish readied the subscribers' stream writers on this
		// goroutine's processor, where they would wait behind the record
		// and the teardown that follow (1.4 ms of a crash's 2.8 here,
		// measured from the publish to the stream's write): let them
		// write first.
		goruntime.Gosched()
	}
	if !durable {
		s.persist(e, next, false)
	}
	if ev != "" {
		s.log.Info("sandbox "+strings.TrimPrefix(ev, "sandbox."), "sandbox", next.ID, "errorReason", next.ErrorReason)
	}
}

// persist writes next as e's record; an error is logged: the in-memory
// state still tells the truth about the process.
func (s *Supervisor) persist(e *sandbox, next Sandbox, durable bool) {
	if err := s.writeRecord(e.id, s.toRecord(e, next, s.handleState(e)), durable); err != nil {
		s.log.Error("persist sandbox record", "sandbox", next.ID, "err", err)
	}
}

func (s *Supervisor) handleState(e *sandbox) runtime.HandleState {
	s.mu.Lock()
	h := e.handle
	s.mu.Unlock()
	if h == nil {
		return runtime.HandleState{}
	}
	return h.State()
}

// exited handles a workload that ended by itself.
func (s *Supervisor) exited(e *sandbox, h runtime.Handle) {
	how := h.Exit().String()
	var port int
	// The release under the op lock too: a Start waits for it, so the
	// old workload's port, logs and remains go before a new one comes.
	e.op.Lock()
	// Recorded after the event, not fsynced (commitAs): a workload that
	// ended by itself is seen ended the moment it ends. A power loss that
	// undid the record would leave it saying "started" in another boot,
	// where the daemon finds every child gone and says stopped all the
	// same.
	stopped := s.transitionHoldingOp(e, h, false, func(sb *Sandbox) (string, bool) {
		if !sb.State.Live() {
			return "", false
		}
		if err := markExited(sb, how, s.clock()); err != nil {
			s.log.Error("sandbox state", "sandbox", e.id, "err", err)
			return "", false
		}
		port = sb.Port
		s.stats.stopped(sb.StopReason)
		return EventStopped, true
	})
	if stopped {
		s.gone(e, h, port)
	}
	e.op.Unlock()
	if stopped {
		s.afterStop(e)
	}
}

// markExited records in sb that its workload ended by itself, how, at now.
func markExited(sb *Sandbox, how string, now time.Time) error {
	errorReason, why := how, StopCrashed
	if sb.State == Starting {
		errorReason, why = ReasonExitedStartup+": "+how, StopStartupFailed
	}
	if err := move(sb, Stopped); err != nil {
		return err
	}
	sb.ErrorReason, sb.StopReason = errorReason, why
	sb.StoppedAt = now
	sb.UpdatedAt = now
	return nil
}

// Stop stops a sandbox: SIGTERM, the grace period, SIGKILL (force skips
// the grace). It is terminal and idempotent: stopping a stopped sandbox
// returns it unchanged. A stop runs to its end even when ctx ends first;
// Stop then returns ctx's error without waiting for it.
func (s *Supervisor) Stop(ctx context.Context, id string, force bool) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	grace := e.grace
	if force {
		grace = 0
	}
	if err := s.detach(ctx, func() error { return s.stop(e, StopExplicit, "", grace) }); err != nil {
		return Sandbox{}, err
	}
	// Not Get: a sandbox with auto-delete 0 is already gone (destroyed).
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.info, nil
}

// stop ends e's workload and marks it stopped; see stopHoldingOp.
func (s *Supervisor) stop(e *sandbox, why StopReason, errorReason string, grace time.Duration) error {
	e.op.Lock()
	stopped, err := s.stopHoldingOp(e, why, errorReason, grace)
	e.op.Unlock()
	if stopped && why != StopDeleted {
		s.afterStop(e)
	}
	return err
}

// stopHoldingOp ends e's workload and marks it stopped with the reasons.
// The caller holds e.op for the whole stop, so operations on e wait for it;
// other sandboxes do not. The port is released only after the workload is
// gone. It reports whether it stopped anything.
func (s *Supervisor) stopHoldingOp(e *sandbox, why StopReason, errorReason string, grace time.Duration) (stopped bool, err error) {
	s.mu.Lock()
	live, h, port := e.info.State.Live(), e.handle, e.info.Port
	if live {
		to := TeardownStop
		if why == StopDeleted {
			to = TeardownDelete
		}
		if err := setTeardown(&e.teardown, to); err != nil {
			s.mu.Unlock()
			return false, fmt.Errorf("stop %s: %w", e.id, err)
		}
	}
	s.mu.Unlock()
	if !live {
		return false, nil
	}
	defer func() { // a delete goes on being one until it is done
		s.mu.Lock()
		if e.teardown == TeardownStop || err != nil {
			_ = setTeardown(&e.teardown, NoTeardown) // none stays none
		}
		s.mu.Unlock()
	}()
	if h != nil {
		// Bounded, whoever asked: callers that may leave go through
		// detach.
		ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
		err := h.Stop(ctx, grace)
		cancel()
		if err != nil {
			s.log.Error("stop sandbox", "sandbox", e.id, "err", err)
			return false, fmt.Errorf("stop %s: %w", e.id, err)
		}
	}
	s.mu.Lock()
	next := e.info
	s.mu.Unlock()
	if err := move(&next, Stopped); err != nil {
		return false, fmt.Errorf("stop %s: %w", e.id, err)
	}
	next.ErrorReason = errorReason
	next.StopReason = why
	next.StoppedAt = s.clock()
	next.UpdatedAt = next.StoppedAt
	s.stats.stopped(why)
	s.commit(e, next, EventStopped)
	s.gone(e, h, port)
	return true, nil
}

// gone releases what a sandbox's workload held, once it is gone: its port,
// its logs' cap and, through the runtime's Delete, whatever the runtime
// made for it. Each handle passes here once: from exited or from a stop,
// whichever committed the stop.
func (s *Supervisor) gone(e *sandbox, h runtime.Handle, port int) {
	s.ports.release(port, e.id)
	s.logs.Release(e.id)
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Delete(ctx); err != nil {
		s.log.Error("runtime delete", "sandbox", e.id, "err", err)
	}
}

// afterStop deletes a sandbox whose auto-delete interval is zero.
func (s *Supervisor) afterStop(e *sandbox) {
	s.mu.Lock()
	ad := e.info.AutoDeleteInterval
	s.mu.Unlock()
	if ad != nil && *ad == 0 {
		if err := s.delete(e); err != nil {
			s.log.Error("auto-delete", "sandbox", e.id, "err", err)
		}
	}
}

// Delete stops a sandbox if needed and removes its directory and record.
// Deleting a sandbox that does not exist succeeds and touches nothing on
// disk, whatever the root holds under that name. Like Stop, a delete runs
// to its end even when ctx ends first.
func (s *Supervisor) Delete(ctx context.Context, id string) error {
	e, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.detach(ctx, func() error { return s.delete(e) })
}

func (s *Supervisor) delete(e *sandbox) error {
	if err := s.stop(e, StopDeleted, "", e.grace); err != nil {
		return err
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	if cur, ok := s.sandboxes[e.id]; !ok || cur != e {
		s.mu.Unlock()
		return nil // deleted meanwhile
	}
	if !CanMove(e.info.State, Destroyed) { // stopped above; checked before anything is removed
		err := &MoveError{From: e.info.State, To: Destroyed}
		s.mu.Unlock()
		return fmt.Errorf("delete %s: %w", e.id, err)
	}
	if err := setTeardown(&e.teardown, TeardownDelete); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("delete %s: %w", e.id, err)
	}
	s.mu.Unlock()
	if err := s.fs.removeAll(e.id); err != nil {
		s.mu.Lock()
		_ = setTeardown(&e.teardown, NoTeardown)
		s.mu.Unlock()
		return fmt.Errorf("remove sandbox directory: %w", err)
	}
	s.logs.Forget(e.id)
	s.tools.forget(e.id)
	s.terms.forget(e.id)
	s.ctxs.forget(e.id)
	s.lsps.forget(e.id)
	s.mu.Lock()
	delete(s.sandboxes, e.id)
	gone := e.info
	_ = move(&gone, Destroyed) // checked above, under the same op lock
	gone.UpdatedAt = s.clock()
	e.setInfoLocked(gone)
	s.events.publish(Event{Type: EventDeleted, Time: gone.UpdatedAt, Sandbox: gone})
	s.mu.Unlock()
	s.log.Info("sandbox deleted", "sandbox", gone.ID)
	return nil
}
