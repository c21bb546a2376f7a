package supervisor

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// ErrUnknownSnapshot is a create that names a snapshot this daemon does
// not have.
var ErrUnknownSnapshot = errors.New("unknown snapshot")

// checkSnapshots fills the snapshots' defaults from opts and checks them
// against the registered runtimes.
func checkSnapshots(opts *Options) (map[string]snapshot.Snapshot, error) {
	out := map[string]snapshot.Snapshot{}
	for _, p := range opts.Snapshots {
		switch {
		case !validName(p.Name):
			return nil, fmt.Errorf("snapshot name %q must match %s", p.Name, nameRE)
		case out[p.Name].Name != "":
			return nil, fmt.Errorf("snapshot %q defined twice", p.Name)
		}
		if p.Runtime == "" {
			p.Runtime = opts.Runtimes.Default()
		}
		rt, ok := opts.Runtimes.Get(p.Runtime)
		if !ok {
			return nil, fmt.Errorf("snapshot %q: runtime %q: this daemon runs %s", p.Name, p.Runtime, strings.Join(opts.Runtimes.Names(), ", "))
		}
		images := rt.Capabilities().Images
		switch {
		case p.Image != "" && !images:
			return nil, fmt.Errorf("snapshot %q: the %s runtime runs no images", p.Name, p.Runtime)
		case len(p.Command) == 0 && !images && p.Name != snapshot.Default:
			return nil, fmt.Errorf("snapshot %q: a %s snapshot needs a command", p.Name, p.Runtime)
		case slices.Contains(p.Command, ""):
			return nil, fmt.Errorf("snapshot %q: its command has an empty argument", p.Name)
		case slices.ContainsFunc(p.Command, hasNUL):
			return nil, fmt.Errorf("snapshot %q: its command has a NUL byte", p.Name)
		}
		if p.ReadyPath == "" {
			p.ReadyPath = opts.ReadyPath
		}
		if !strings.HasPrefix(p.ReadyPath, "/") {
			return nil, fmt.Errorf("snapshot %q: ready path %q must start with /", p.Name, p.ReadyPath)
		}
		if p.StartupTimeout <= 0 {
			p.StartupTimeout = opts.StartupTimeout
		}
		if p.StopGrace == nil || *p.StopGrace < 0 {
			g := opts.StopGrace
			p.StopGrace = &g
		}
		for k, v := range p.Env {
			if !runtime.ValidEnvName(k) || runtime.Reserved(k) {
				return nil, fmt.Errorf("snapshot %q: env key %q is not a variable it may set", p.Name, k)
			}
			if hasNUL(v) { // never the value: it may be a secret
				return nil, fmt.Errorf("snapshot %q: env %s has a NUL byte", p.Name, k)
			}
		}
		if err := checkIsolation(p); err != nil {
			return nil, err
		}
		p.Command = slices.Clone(p.Command)
		p.Mounts = slices.Clone(p.Mounts)
		p.Env = maps.Clone(p.Env)
		out[p.Name] = p
	}
	return out, nil
}

// checkIsolation checks what snapshot p says of its isolation.
func checkIsolation(p snapshot.Snapshot) error {
	switch p.Isolation {
	case "", runtime.IsolationNamespaces, runtime.IsolationOff:
	default:
		return fmt.Errorf("snapshot %q: isolation %q: want namespaces or off", p.Name, p.Isolation)
	}
	for _, m := range p.Mounts {
		for what, path := range map[string]string{"source": m.Source, "target": m.Target} {
			if path == "" && what == "target" {
				continue
			}
			if !filepath.IsAbs(path) || filepath.Clean(path) != path || hasNUL(path) {
				return fmt.Errorf("snapshot %q: mount %s %q must be a clean absolute path", p.Name, what, path)
			}
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("snapshot %q: mount source: %w", p.Name, err)
		}
	}
	return nil
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// Snapshots lists the snapshots this daemon runs, by name.
func (s *Supervisor) Snapshots() []snapshot.Snapshot {
	snaps := *s.snapshots.Load()
	out := make([]snapshot.Snapshot, 0, len(snaps))
	for _, name := range slices.Sorted(maps.Keys(snaps)) {
		out = append(out, snaps[name])
	}
	return out
}

// SetSnapshots replaces the snapshots creates may name (a reload), after
// checking them as New does; on error the old ones stay. Sandboxes made
// from a snapshot keep what it said: their records hold it.
func (s *Supervisor) SetSnapshots(list []snapshot.Snapshot) error {
	opts := s.opts
	opts.Snapshots = list
	snaps, err := checkSnapshots(&opts)
	if err != nil {
		return err
	}
	s.snapshots.Store(&snaps)
	return nil
}

// resolve picks what a create runs. A snapshot that names a profile runs
// it (on the profile's runtime; a request naming another runtime is
// refused). One that names none is an image reference for a runtime that
// runs images (the one asked for; else, when it reads as one, the first
// registered that does), and unknown otherwise. No snapshot runs the profile named default
// (whatever its runtime, unless the request names another), else the
// runtime's own default.
func (s *Supervisor) resolve(req CreateRequest) (snapshot.Snapshot, error) {
	snaps := *s.snapshots.Load()
	if p, ok := snaps[req.Snapshot]; ok { // no snapshot is named ""
		if req.Runtime != "" && req.Runtime != p.Runtime {
			return snapshot.Snapshot{}, invalid("snapshot %s runs on runtime %s, not %s", p.Name, p.Runtime, Clip(req.Runtime, MaxQuoted))
		}
		return p, nil
	}
	if req.Snapshot == "" && req.Runtime == "" {
		if p, ok := snaps[snapshot.Default]; ok { // whatever runtime it runs on
			return p, nil
		}
	}
	rtName := req.Runtime
	if rtName == "" {
		rtName = s.opts.Runtimes.Default()
		if looksLikeImage(req.Snapshot) {
			// A reference with a tag, a path or a digest that names no
			// snapshot is an image, for a runtime that runs images; a
			// bare word stays a snapshot's name (a typo is told the
			// snapshots there are).
			rtName = s.imageRuntime(rtName)
		}
	}
	rt, ok := s.opts.Runtimes.Get(rtName)
	if !ok {
		return snapshot.Snapshot{}, fmt.Errorf("%w: %q: this daemon runs %s", ErrUnsupportedRuntime, Clip(rtName, MaxQuoted), strings.Join(s.opts.Runtimes.Names(), ", "))
	}
	grace := s.opts.StopGrace
	plain := snapshot.Snapshot{Runtime: rtName, ReadyPath: s.opts.ReadyPath, StartupTimeout: s.opts.StartupTimeout, StopGrace: &grace}
	if req.Snapshot == "" {
		if p, ok := snaps[snapshot.Default]; ok && p.Runtime == rtName {
			return p, nil
		}
		return plain, nil // the runtime asked for, which the default does not run on
	}
	if rt.Capabilities().Images {
		plain.Name, plain.Image = req.Snapshot, req.Snapshot
		return plain, nil
	}
	known := "none"
	if len(snaps) > 0 {
		known = strings.Join(slices.Sorted(maps.Keys(snaps)), ", ")
	}
	return snapshot.Snapshot{}, fmt.Errorf("%w: %q; this daemon has %s (the %s runtime runs only these)", ErrUnknownSnapshot, Clip(req.Snapshot, MaxQuoted), known, rtName)
}

// imageRuntime is the first registered runtime that runs images, given
// the default's name first; the default when none does.
func (s *Supervisor) imageRuntime(def string) string {
	names := append([]string{def}, s.opts.Runtimes.Names()...)
	for _, n := range names {
		if rt, ok := s.opts.Runtimes.Get(n); ok && rt.Capabilities().Images {
			return n
		}
	}
	return def
}

// looksLikeImage reports whether name reads as an image reference rather
// than a snapshot's name: it has a tag, a path or a digest.
func looksLikeImage(name string) bool { return strings.ContainsAny(name, ":/@") }
