package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// RefreshActivity is the keep-alive: it moves lastActivityAt to now and
// changes nothing else. Only live sandboxes can be kept alive: a failed
// keep-alive must not hide that a sandbox was stopped.
func (s *Supervisor) RefreshActivity(id string) error {
	_, err := s.mutate(id, func(*Sandbox, runtime.Handle) error { return nil })
	return err
}

// SetAutoStop sets the idle interval (0 disables) and counts as activity.
func (s *Supervisor) SetAutoStop(id string, interval time.Duration) (Sandbox, error) {
	if interval < 0 {
		return Sandbox{}, field.Errorf(field.AutoStop, "must not be negative")
	}
	return s.mutate(id, func(sb *Sandbox, _ runtime.Handle) error {
		sb.AutoStopInterval = interval
		sb.UpdatedAt = s.clock()
		return nil
	})
}

// Resize applies new limits to a running sandbox (nil fields keep theirs)
// and counts as activity. A stopped sandbox is ErrNotRunning; a limit its
// runtime cannot enforce is ErrLimitsUnsupported (or dropped, when the
// daemon ignores such limits); nothing changes on error.
func (s *Supervisor) Resize(ctx context.Context, id string, l Limits) (Sandbox, error) {
	sb, err := s.mutate(id, func(sb *Sandbox, handle runtime.Handle) error {
		res, err := l.over(sb.Resources)
		if err != nil {
			return err
		}
		rt, _ := s.opts.Runtimes.Get(sb.Runtime)
		if res, err = s.enforceable(rt, sb.Runtime, res); err != nil {
			return err
		}
		if res != sb.Resources {
			r, ok := handle.(runtime.Resizer)
			if !ok {
				return fmt.Errorf("%w: the %s runtime cannot change limits", ErrLimitsUnsupported, sb.Runtime)
			}
			if err := r.Resize(ctx, res); err != nil {
				return err
			}
		}
		sb.Resources, sb.UpdatedAt = res, s.clock()
		return nil
	})
	return sb, err
}

// mutate applies change to a live sandbox under its op lock and bumps its
// activity, persisting the result. A sandbox that is not running is
// refused with ErrNotRunning; an error from change leaves it as it was.
func (s *Supervisor) mutate(id string, change func(*Sandbox, runtime.Handle) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	next, h := e.info, e.handle
	s.mu.Unlock()
	if !next.State.Live() || h == nil {
		return next, fmt.Errorf("%w: %s is %s", ErrNotRunning, Clip(id, MaxQuoted), next.State)
	}
	if err := change(&next, h); err != nil {
		return next, err
	}
	next.LastActivityAt = s.clock()
	s.commit(e, next, "")
	return next, nil
}

// Check runs the periodic work once: it stops started sandboxes idle
// past their auto-stop interval (never starting ones), stops live ones past
// the maximum lifetime, and deletes stopped ones past their auto-delete
// interval. It returns when that work is done.
func (s *Supervisor) Check() {
	type job struct {
		e      *sandbox
		delete bool
	}
	now := s.clock()
	var jobs []job
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if e.pending {
			continue
		}
		sb := e.info
		switch {
		case s.idle(sb, now) || s.tooOld(sb, now):
			jobs = append(jobs, job{e: e})
		case sb.State == Stopped && sb.AutoDeleteInterval != nil && !now.Before(sb.StoppedAt.Add(*sb.AutoDeleteInterval)):
			jobs = append(jobs, job{e: e, delete: true})
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			if j.delete {
				if err := s.delete(j.e); err != nil {
					s.log.Error("auto-delete", "sandbox", j.e.id, "err", err)
				}
				return
			}
			s.checkOne(j.e)
		})
	}
	wg.Wait()
}

func (s *Supervisor) idle(sb Sandbox, now time.Time) bool {
	return sb.State == Started && sb.AutoStopInterval > 0 && !now.Before(sb.LastActivityAt.Add(sb.AutoStopInterval))
}

func (s *Supervisor) tooOld(sb Sandbox, now time.Time) bool {
	limit := time.Duration(s.maxLifetime.Load())
	return sb.State.Live() && limit > 0 && !now.Before(sb.CreatedAt.Add(limit))
}

// checkOne re-checks under the sandbox's lock (a keep-alive may have landed
// since the sweep looked) and stops it through the same path as an
// explicit stop.
func (s *Supervisor) checkOne(e *sandbox) {
	e.op.Lock()
	now := s.clock()
	s.mu.Lock()
	sb := e.info
	s.mu.Unlock()
	var stopped bool
	var err error
	switch {
	case s.tooOld(sb, now):
		stopped, err = s.stopHoldingOp(e, StopOther, ReasonMaxLifetime, e.grace)
	case s.idle(sb, now):
		stopped, err = s.stopHoldingOp(e, StopAutoStopped, ReasonAutoStopped, e.grace)
	}
	e.op.Unlock()
	if err != nil {
		s.log.Error("auto-stop", "sandbox", e.id, "err", err)
	}
	if stopped {
		s.afterStop(e)
	}
}

// SetDefaults changes the auto-stop interval given to creates that do not
// say (0 disables) and the maximum lifetime (0: none), as a reload does.
// The lifetime applies to every live sandbox from the next check on; the
// auto-stop default only to sandboxes created from now on.
func (s *Supervisor) SetDefaults(autoStop, maxLifetime time.Duration) {
	s.autoStop.Store(int64(max(autoStop, 0)))
	s.maxLifetime.Store(int64(max(maxLifetime, 0)))
}
