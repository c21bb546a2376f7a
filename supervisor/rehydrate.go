package supervisor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Rehydration results, for metrics.
const (
	RehydrateAdopted   = "adopted"   // live and verified: re-adopted
	RehydrateStopped   = "stopped"   // was live, found dead or not ours: flipped to stopped
	RehydrateKept      = "kept"      // already stopped: loaded as is
	RehydrateAbandoned = "abandoned" // create never finished: swept and removed
	RehydrateCorrupt   = "corrupt"   // unreadable record: left alone
	RehydrateForeign   = "foreign"   // a directory with no record of this root: left alone
)

// RehydrateResults lists every rehydration result.
var RehydrateResults = []string{RehydrateAdopted, RehydrateStopped, RehydrateKept, RehydrateAbandoned, RehydrateCorrupt, RehydrateForeign}

// rehydrate loads every <root>/<id>/sandbox.json. A live record is trusted
// only once its workload is verified; the failure of one record is logged
// and never stops the daemon. It removes only what it can prove it made
// (staging and trash directories, abandoned creates); anything else in the
// root is logged once and left alone.
func (s *Supervisor) rehydrate(ctx context.Context) {
	ents, err := os.ReadDir(s.opts.Root)
	if err != nil {
		s.log.Error("read root", "root", s.opts.Root, "err", err)
		return
	}
	sweep := map[string][]string{} // runtime → markers whose workloads must not survive
	s.fs.removeTempFiles("")
	for _, ent := range ents {
		name := ent.Name()
		switch {
		case name == lockFile || name == MarkFile || name == SignInsFile || name == VolumesDir || s.fs.ownTempFile(name):
			continue
		case s.fs.ownTemp(name):
			// A create or a delete interrupted by a crash. No workload
			// ever ran in a staging directory: it is renamed to its
			// sandbox name before the spawn.
			if err := s.fs.removeAll(name); err != nil {
				s.log.Error("remove interrupted create or delete", "dir", name, "err", err)
			}
			continue
		case ent.Type()&fs.ModeSymlink != 0 && validName(name):
			s.log.Warn("refusing a sandbox directory that is a symbolic link; left alone", "entry", name)
			s.stats.rehydrated(RehydrateForeign)
			continue
		case !ent.IsDir() || !validName(name):
			s.log.Warn("leaving alone an entry the daemon did not create", "entry", name)
			continue
		}
		if rt, marker := s.rehydrateOne(ctx, name); marker != "" {
			sweep[rt] = append(sweep[rt], marker)
		}
	}
	s.sweep(ctx, sweep)
	s.prune(ctx)
	if len(sweep) == 0 {
		return
	}
	// A child that the dead daemon had forked but not yet exec'd carries
	// no marker at the first sweep and gets one when it execs, a moment
	// later (longer on a loaded machine): sweep the same markers again,
	// and only then remove the records of interrupted creates, so that no
	// such child can outlive the record that names its marker.
	s.bg.Go(func() {
		for _, after := range []time.Duration{200 * time.Millisecond, time.Second, 3 * time.Second} {
			select {
			case <-s.lifetime.Done():
				return
			case <-time.After(after):
			}
			s.sweep(s.lifetime, sweep)
		}
		s.removeAbandoned()
		s.clearStartIntents()
	})
}

// clearStartIntents rewrites the records that still name the marker of
// an interrupted start, once it has been swept: the next daemon need not
// sweep it again.
func (s *Supervisor) clearStartIntents() {
	// startIntent is set before a sandbox is registered and cleared only
	// here: read as registered.
	s.mu.Lock()
	var swept []*sandbox
	for _, e := range s.sandboxes {
		if e.startIntent {
			swept = append(swept, e)
		}
	}
	s.mu.Unlock()
	for _, e := range swept {
		e.op.Lock()
		e.startIntent = false
		s.mu.Lock()
		sb, current := e.info, s.sandboxes[e.id] == e
		s.mu.Unlock()
		if current && !sb.State.Live() { // a start since wrote its own record
			if err := s.writeRecord(e.id, s.toRecord(e, sb, s.handleState(e)), false); err != nil {
				s.log.Error("persist sandbox record", "sandbox", e.id, "err", err)
			}
		}
		e.op.Unlock()
	}
}

// sweep hands each runtime the markers whose workloads must not survive.
func (s *Supervisor) sweep(ctx context.Context, markers map[string][]string) {
	own := s.owned()
	for name, m := range markers {
		if rt, ok := s.opts.Runtimes.Get(name); ok {
			if err := rt.Sweep(ctx, m, own); err != nil {
				s.log.Error("sweep the leftovers of sandboxes that must not survive", "runtime", name, "err", err)
			}
		}
	}
}

// owned is what the daemon can prove it made: the markers its records
// name, and the root's seal.
func (s *Supervisor) owned() runtime.Owned {
	known := map[string]bool{}
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if e.marker != "" {
			known[e.marker] = true
		}
	}
	s.mu.Unlock()
	return runtime.Owned{Known: known, Seal: s.fs.seal}
}

// prune has each runtime release what it made for workloads no live
// record names: the remains of sandboxes whose Delete never ran.
func (s *Supervisor) prune(ctx context.Context) {
	keep := map[string][]string{}
	own := s.owned()
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if e.info.State.Live() && !e.abandoned {
			keep[e.info.Runtime] = append(keep[e.info.Runtime], e.marker)
		}
	}
	s.mu.Unlock()
	for _, name := range s.opts.Runtimes.Names() {
		if rt, _ := s.opts.Runtimes.Get(name); rt != nil {
			if p, ok := rt.(runtime.Pruner); ok {
				if err := p.Prune(ctx, keep[name], own); err != nil {
					s.log.Error("prune what the runtime made for sandboxes no live record names", "runtime", name, "err", err)
				}
			}
		}
	}
}

// removeAbandoned removes the directories of interrupted creates, which
// rehydrate kept (reserved, invisible) until their markers were swept.
func (s *Supervisor) removeAbandoned() {
	s.mu.Lock()
	var gone []*sandbox
	for _, e := range s.sandboxes {
		if e.abandoned {
			gone = append(gone, e)
		}
	}
	s.mu.Unlock()
	for _, e := range gone {
		if err := s.fs.removeAll(e.id); err != nil {
			s.log.Error("remove sandbox whose create was interrupted", "sandbox", e.id, "err", err)
		}
		s.mu.Lock()
		if s.sandboxes[e.id] == e {
			delete(s.sandboxes, e.id)
		}
		s.mu.Unlock()
	}
}

// rehydrateOne loads one record. It returns a runtime and a marker when
// whatever still carries that marker must be swept.
//
// It is long because each way a record can be found (live, gone, half-
// made, interrupted start, foreign) is decided here, in order, so that
// no case is handled twice.
func (s *Supervisor) rehydrateOne(ctx context.Context, name string) (rtName, marker string) {
	log := s.log.With("sandbox", name)
	dir := filepath.Join(s.opts.Root, name)
	r, err := s.readRecord(name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errForeignRecord):
		// Not provably ours: the daemon builds a sandbox directory under
		// a staging name and gives it its own name only with a record.
		log.Warn("leaving alone a directory that holds no record of this root", "err", err)
		s.stats.rehydrated(RehydrateForeign)
		return "", ""
	case err != nil:
		log.Warn("leaving alone a sandbox directory whose record cannot be read", "err", err)
		s.stats.rehydrated(RehydrateCorrupt)
		return "", ""
	}
	// Its directory is provably ours: what an interrupted write left in
	// it goes.
	s.fs.removeTempFiles(name)
	e := &sandbox{
		id: r.ID, dir: dir, marker: r.Marker, grace: time.Duration(r.StopGraceMs) * time.Millisecond,
		readyPath: r.ReadyPath, startup: time.Duration(r.StartupTimeoutMs) * time.Millisecond,
		info: r.sandbox(),
	}
	if e.readyPath == "" { // written before snapshots: the daemon's then
		e.readyPath = s.opts.ReadyPath
	}
	if e.startup <= 0 {
		e.startup = s.opts.StartupTimeout
	}
	rt, haveRuntime := s.opts.Runtimes.Get(r.Runtime)
	if r.State.Live() {
		if r.Handle == nil {
			// Created but never recorded as started: the workload, if
			// any, was spawned just before the daemon died. No client
			// was told it exists.
			// Its directory and record stay, the name reserved, until
			// the sweeps below are done: a daemon that dies before then
			// finds the same record and sweeps again.
			log.Warn("removing sandbox whose create was interrupted")
			s.register(&sandbox{id: r.ID, dir: dir, marker: r.Marker, pending: true, abandoned: true})
			s.stats.rehydrated(RehydrateAbandoned)
			if !haveRuntime {
				return "", ""
			}
			return r.Runtime, r.Marker
		}
		var reason string
		if !haveRuntime {
			reason = "runtime " + r.Runtime + " not available after restart"
		} else if h, err := rt.Adopt(ctx, *r.Handle); err == nil {
			if e.info.Port == 0 || s.ports.claim(e.info.Port, e.id) {
				e.handle = h
				e.info.Isolation = isolationOf(h)
				if ep := h.Endpoint(); !ep.IsZero() {
					e.info.Endpoint = ep // else the record's (Record.sandbox)
				}
				s.reconcileLimits(ctx, e, name, h.State())
				s.register(e)
				log.Info("sandbox re-adopted", "port", e.info.Port, "state", e.info.State)
				s.stats.rehydrated(RehydrateAdopted)
				launched := e.info.LaunchedAt
				if launched.IsZero() {
					launched = e.info.CreatedAt
				}
				s.watch(e, h, e.startup-s.clock().Sub(launched))
				return "", ""
			}
			// Two records claim one port: keep the first, stop this one.
			if err := h.Stop(ctx, e.grace); err != nil {
				log.Error("stop sandbox whose port is taken", "err", err)
			}
			if err := h.Delete(ctx); err != nil {
				log.Error("runtime delete", "err", err)
			}
			reason = "port conflict after restart"
		} else {
			rtName, marker = r.Runtime, r.Marker // leftovers whose leader is gone
			switch {
			case errors.Is(err, runtime.ErrGone):
				reason = runtime.Exit{Unknown: true}.String()
			case errors.Is(err, runtime.ErrNotOurs):
				reason = "process not verifiable after restart (pid reused); not signalled"
			default:
				reason = "not re-adopted after restart: " + err.Error()
			}
		}
		if err := markExited(&e.info, reason, s.clock()); err != nil {
			log.Error("sandbox state", "err", err) // a live record: cannot happen
		}
		s.stats.stopped(e.info.StopReason)
		// Not fsynced: if this write is lost, the next start finds the
		// same dead workload and flips it again.
		if err := s.writeRecord(name, s.toRecord(e, e.info, *r.Handle), false); err != nil {
			log.Error("persist sandbox record", "err", err)
		}
		log.Warn("sandbox found dead on restart", "errorReason", e.info.ErrorReason)
		s.register(e)
		s.stats.rehydrated(RehydrateStopped)
		return rtName, marker
	}
	e.startIntent = r.StartingMarker != ""
	s.register(e)
	s.stats.rehydrated(RehydrateKept)
	if r.StartingMarker != "" {
		// A start again was cut before its workload was recorded: what
		// may run under its marker is swept; the sandbox stays stopped.
		log.Warn("sweeping the workload of a start that was interrupted; the sandbox stays stopped")
		return r.Runtime, r.StartingMarker
	}
	return "", ""
}

// reconcileLimits makes the record of an adopted sandbox say the limits
// in force (a resize cut by a crash may have changed them, or not, after
// the record was written).
func (s *Supervisor) reconcileLimits(ctx context.Context, e *sandbox, name string, st runtime.HandleState) {
	lr, ok := e.handle.(runtime.LimitReader)
	if !ok {
		return
	}
	got, err := lr.Limits(ctx)
	if err != nil {
		s.log.Warn("read the limits in force of an adopted sandbox", "sandbox", e.id, "err", err)
		return
	}
	if got == e.info.Resources {
		return
	}
	s.log.Warn("the limits in force differ from the record (a resize cut short?); the record now says what is enforced",
		"sandbox", e.id, "recorded", e.info.Resources, "enforced", got)
	e.info.Resources = got
	if err := s.writeRecord(name, s.toRecord(e, e.info, st), false); err != nil {
		s.log.Error("persist sandbox record", "sandbox", e.id, "err", err)
	}
}

func (s *Supervisor) register(e *sandbox) {
	s.mu.Lock()
	s.sandboxes[e.id] = e
	s.mu.Unlock()
}
