// This file is long because one sandbox's group lives on both
// hierarchies (the v1 controllers and the unified one), and each step
// (make, enforce, read, kill, remove) does both.

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// ErrUnsupported is wrapped by Create and Set when a limit cannot be
// enforced on this machine.
var ErrUnsupported = errors.New("cannot enforce")

// Ref is a group's persisted form: its path in the cgroup2 hierarchy and,
// on a hybrid machine, in each v1 hierarchy it uses, all as
// /proc/<pid>/cgroup shows paths.
type Ref struct {
	Path string            `json:"path"`
	V1   map[string]string `json:"v1,omitempty"`
}

// Group is one sandbox's cgroup. It implements proc.Placement.
type Group struct {
	m    *Manager
	name string
	path string // in the cgroup2 hierarchy

	mu sync.Mutex
	// v1 maps a limit to the group's path in that limit's v1 hierarchy
	// (hybrid machines), made only for a limit the sandbox has: a v1 group
	// costs every spawn into it a thread's move, which waits for an RCU
	// grace period (about 10 ms here). Replaced, never changed in place:
	// read it with v1s.
	v1       map[string]string
	fd       int // the cgroup2 directory, open while the group may be spawned into; -1 after
	empty    chan struct{}
	emptyErr error
	watching bool
}

var _ proc.Placement = (*Group)(nil)

// Enforceable returns the part of r this machine's cgroups can enforce
// and, when that is not all of r, an error wrapping ErrUnsupported that
// names the rest and says why. A nil Manager enforces nothing.
func (m *Manager) Enforceable(r Limits) (Limits, error) {
	info := Info{Mode: ModeOff}
	if m != nil {
		info = m.info
	}
	var missing []string
	drop := func(limit string, set bool, clear func()) {
		if set && !info.Supports(limit) {
			missing = append(missing, limit)
			clear()
		}
	}
	drop(LimitCPU, r.MilliCPU > 0, func() { r.MilliCPU = 0 })
	drop(LimitMemory, r.MemoryBytes > 0, func() { r.MemoryBytes = 0 })
	drop(LimitPids, r.Pids > 0, func() { r.Pids = 0 })
	if len(missing) == 0 {
		return r, nil
	}
	why := "cgroups are " + string(info.Mode)
	if info.Note != "" {
		why += " (" + info.Note + ")"
	}
	return r, fmt.Errorf("%w %s limits: %s", ErrUnsupported, strings.Join(missing, ", "), why)
}

// Supports is nil when the machine can enforce every limit in r, else
// Enforceable's error.
func (m *Manager) Supports(r Limits) error {
	_, err := m.Enforceable(r)
	return err
}

// validName refuses names that would leave the subtree.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00\n")
}

// Create makes the group called name under the daemon's subtree, with the
// limits r. On error nothing of it remains.
func (m *Manager) Create(name string, r Limits) (g *Group, err error) {
	if !validName(name) {
		return nil, fmt.Errorf("cgroup name %q", name)
	}
	if err := m.Supports(r); err != nil {
		return nil, err
	}
	g = &Group{m: m, name: name, path: joinPath(m.base, name), v1: map[string]string{}, fd: -1}
	// The subtree goes with its last group (Remove): make it again when
	// it is missing, and once more should that race with the removal.
	// Only then: its mkdirs (one a hierarchy) cost a create four system
	// calls, each waiting on a directory's lock that concurrent creates
	// share.
	for attempt := 0; ; attempt++ {
		err := os.Mkdir(m.dir(g.path), 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		if err := m.ensureBase(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			g.Close()
			_ = g.Remove()
		}
	}()
	// A v1 group only for a limit the sandbox has (see Group.v1): the
	// child is born in its cgroup2 group, which holds and kills it and
	// gives its CPU time; a limit set later moves it in (Set).
	for c := range m.v1 {
		if !r.has(c) {
			continue
		}
		if err := g.makeV1(c); err != nil {
			return g, err
		}
	}
	if err := g.Set(r); err != nil {
		return g, err
	}
	fd, err := unix.Open(m.dir(g.path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return g, fmt.Errorf("open cgroup: %w", err)
	}
	g.fd = fd
	return g, nil
}

// Open returns the group ref names, made by an earlier daemon for the
// sandbox whose group is called name. It refuses a ref that does not name
// such a group, and returns an error wrapping fs.ErrNotExist when the
// group is gone.
func (m *Manager) Open(ref Ref, name string) (*Group, error) {
	if !validName(name) || !ownedPath(ref.Path, name) {
		return nil, fmt.Errorf("cgroup %q is not a sandbox group called %q", ref.Path, name)
	}
	g := &Group{m: m, name: name, path: ref.Path, v1: map[string]string{}, fd: -1}
	if _, err := os.Stat(m.dir(g.path)); err != nil {
		return nil, err
	}
	for c, h := range m.v1 {
		if p := ref.V1[c]; p != "" && ownedPath(p, name) {
			g.v1[c] = p
		} else if p := joinPath(h.base, name); exists(h.dir(p)) {
			// Made by a resize whose record a crash did not let be
			// written: the name is the sandbox's marker, ours alone.
			g.v1[c] = p
		}
	}
	return g, nil
}

// makeV1 makes the group's group in limit c's v1 hierarchy.
func (g *Group) makeV1(c string) error {
	h := g.m.v1[c]
	p := joinPath(h.base, g.name)
	err := os.Mkdir(h.dir(p), 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		if err = g.m.ensureBase(); err == nil {
			err = os.Mkdir(h.dir(p), 0o755)
		}
	}
	if err != nil {
		return fmt.Errorf("create cgroup v1 %s: %w", c, err)
	}
	g.mu.Lock()
	next := maps.Clone(g.v1)
	next[c] = p
	g.v1 = next
	g.mu.Unlock()
	return nil
}

// dropV1 removes the group's v1 groups of limits cs that are still empty,
// and forgets them; one a process was moved into stays the group's (the
// kernel refuses to remove it), limited as asked.
func (g *Group) dropV1(cs []string) {
	v1 := g.v1s()
	var gone []string
	for _, c := range cs {
		if err := unix.Rmdir(g.m.v1[c].dir(v1[c])); err == nil || errors.Is(err, unix.ENOENT) {
			gone = append(gone, c)
		}
	}
	g.mu.Lock()
	g.v1 = maps.Clone(g.v1)
	for _, c := range gone {
		delete(g.v1, c)
	}
	g.mu.Unlock()
}

// v1s is the group's v1 groups, by limit; never modify it.
func (g *Group) v1s() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v1
}

// moveIntoV1 moves every process of the group into its v1 group of limit
// c, until a pass over the cgroup2 group (which holds every one of them,
// each child born there) finds none left outside: a process forked while
// its parent was being moved is caught by the next pass.
func (g *Group) moveIntoV1(c string) error {
	dir := g.m.v1[c].dir(g.v1s()[c])
	for range 100 {
		procs, err := readLines(filepath.Join(g.m.dir(g.path), "cgroup.procs"))
		if err != nil {
			return err
		}
		lines, err := readLines(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		in := make(map[string]bool, len(lines))
		for _, pid := range lines {
			in[pid] = true
		}
		moved := false
		for _, pid := range procs {
			if !in[pid] {
				// A process that exits meanwhile is not an error.
				if err := writeFile(filepath.Join(dir, "cgroup.procs"), pid); err != nil && !errors.Is(err, unix.ESRCH) {
					return fmt.Errorf("move %s into cgroup v1 %s: %w", pid, c, err)
				}
				moved = true
			}
		}
		if !moved {
			return nil
		}
	}
	return fmt.Errorf("move into cgroup v1 %s: its processes fork faster than they can be moved", c)
}

// Sweep kills and removes the groups named by names under the daemon's
// subtree: those of sandboxes whose create was interrupted, or whose
// leader is gone. It waits for each to empty until ctx ends.
func (m *Manager) Sweep(ctx context.Context, names []string) error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, name := range names {
		if !validName(name) {
			continue
		}
		ref := Ref{Path: joinPath(m.base, name), V1: map[string]string{}}
		for c, h := range m.v1 {
			ref.V1[c] = joinPath(h.base, name)
		}
		g, err := m.Open(ref, name)
		if err != nil {
			continue
		}
		if empty, err := g.End(); err == nil {
			select {
			case <-empty:
			case <-ctx.Done():
				return errors.Join(append(errs, fmt.Errorf("sweep cgroup %s: %w", g.path, ctx.Err()))...)
			}
		}
		if err := g.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove the cgroup of a swept sandbox: %w", err))
		}
	}
	return errors.Join(errs...)
}

// RemoveEmpty removes the daemon's groups whose name is in known (names
// the daemon can prove it made) but not in keep, where they are empty
// (the kernel refuses the others, which are left alone), then the subtree
// if that empties it. A group whose name is not known is logged and left.
// It must not run while a group may be created (the daemon calls it at
// start).
func (m *Manager) RemoveEmpty(keep []string, known map[string]bool) error {
	if m == nil {
		return nil
	}
	var errs []error
	want := map[string]bool{}
	for _, k := range keep {
		want[k] = true
	}
	dirs := []string{m.dir(m.base)}
	for _, h := range m.v1 {
		dirs = append(dirs, h.dir(h.base))
	}
	for _, base := range dirs {
		ents, err := os.ReadDir(base)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, e := range ents {
			if !e.IsDir() || want[e.Name()] {
				continue
			}
			if !known[e.Name()] {
				m.log.Warn("leaving alone a cgroup no record of this root names", "cgroup", filepath.Join(base, e.Name()))
				continue
			}
			if validName(e.Name()) {
				if err := unix.Rmdir(filepath.Join(base, e.Name())); err == nil {
					m.log.Info("removed the empty cgroup of a sandbox no record names", "cgroup", filepath.Join(base, e.Name()))
				}
			}
		}
	}
	m.Prune()
	return errors.Join(errs...)
}

// ownedPath: p is clean, absolute, and ends in name.
func ownedPath(p, name string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && path.Base(p) == name
}

// Ref is what to persist to Open the group again.
func (g *Group) Ref() Ref {
	r := Ref{Path: g.path}
	if v1 := g.v1s(); len(v1) > 0 {
		r.V1 = maps.Clone(v1)
	}
	return r
}

// FD is the open cgroup2 directory, for CLONE_INTO_CGROUP.
func (g *Group) FD() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fd
}

// Path is the group's cgroup2 path.
func (g *Group) Path() string { return g.path }

// Close releases the directory descriptor; nothing can be spawned into the
// group afterwards. The group itself stays (Remove removes it).
func (g *Group) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
}

// Into opens the group for one more spawn into it (an exec into a
// running sandbox): a proc.Placement of its own, released by its Close, so
// that the group's own descriptor stays closed.
func (g *Group) Into() (*Entry, error) {
	fd, err := unix.Open(g.m.dir(g.path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &Entry{g: g, fd: fd}, nil
}

// Entry is a group opened for one spawn (Into).
type Entry struct {
	g  *Group
	fd int
}

var _ proc.Placement = (*Entry)(nil)

// FD is the open cgroup2 directory.
func (e *Entry) FD() int { return e.fd }

// Path is the group's cgroup2 path.
func (e *Entry) Path() string { return e.g.path }

// Enter is the group's Enter.
func (e *Entry) Enter() (func() error, error) { return e.g.Enter() }

// NeedsThread is the group's NeedsThread.
func (e *Entry) NeedsThread() bool { return e.g.NeedsThread() }

// Close releases the descriptor.
func (e *Entry) Close() { unix.Close(e.fd) }

// Enter moves the calling thread into the group's v1 cgroups, so that a
// child it forks is born in them, and returns how to move it back (see
// proc.Placement).
func (g *Group) Enter() (leave func() error, err error) {
	tid := strconv.Itoa(unix.Gettid())
	from := proc.Cgroups{}
	v1 := g.v1s()
	if len(v1) > 0 {
		b, err := os.ReadFile("/proc/thread-self/cgroup")
		if err != nil {
			return func() error { return err }, err
		}
		from = proc.ParseCgroups(b)
	}
	var moved []string
	leave = func() error {
		var errs []error
		for _, c := range moved {
			errs = append(errs, writeFile(filepath.Join(g.m.v1[c].dir(from[c]), "tasks"), tid))
		}
		return errors.Join(errs...)
	}
	for c, p := range v1 {
		if err := writeFile(filepath.Join(g.m.v1[c].dir(p), "tasks"), tid); err != nil {
			return leave, fmt.Errorf("enter cgroup v1 %s: %w", c, err)
		}
		moved = append(moved, c)
	}
	return leave, nil
}

// NeedsThread reports whether a child must be forked by a thread of its
// own that Enter moves: only when the group has v1 groups. Otherwise
// clone3 alone places the child, from any thread.
func (g *Group) NeedsThread() bool { return len(g.v1s()) > 0 }

// Kill ends every process in the group, however it was started: with
// cgroup.kill, or by freezing the group and killing each member. It does
// not wait; Empty reports when they are gone.
func (g *Group) Kill() error {
	if g.m.canKill {
		err := writeFile(filepath.Join(g.m.dir(g.path), "cgroup.kill"), "1")
		if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		g.m.log.Warn("cgroup.kill failed; killing the group's processes one by one", "cgroup", g.path, "err", err)
	}
	return g.killEach()
}

// killEach freezes the group (where the freezer exists), so that nothing
// in it can fork, sends SIGKILL to each member, each pinned by a pidfd and
// checked to still be in the group before the signal, and thaws it so the
// killed can die. Without a freezer a member may fork between the read
// and the kill: passes repeat until one finds nobody new. It does not
// wait for the members to go (Empty does).
func (g *Group) killEach() error {
	dir := g.m.dir(g.path)
	freeze := filepath.Join(dir, "cgroup.freeze")
	frozen := writeFile(freeze, "1") == nil
	if frozen {
		defer writeFile(freeze, "0")
	}
	signalled := map[int]bool{}
	for range 100 {
		pids, err := readLines(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return nil // the group is gone
		}
		fresh := false
		for _, s := range pids {
			pid, err := strconv.Atoi(s)
			if err != nil || signalled[pid] {
				continue
			}
			signalled[pid], fresh = true, true
			killIfMember(pid, g.path)
		}
		if !fresh || frozen {
			return nil
		}
	}
	return fmt.Errorf("cgroup %s: its processes fork faster than they can be killed", g.path)
}

func killIfMember(pid int, path string) {
	if fd, ok := openMember(pid, path, 0); ok {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	}
}

// openMember pins pid with a pidfd and returns it if the process is in
// the cgroup2 group at path once pinned: read before the pin, the pid
// could have been another process's by then.
func openMember(pid int, path string, flags int) (int, bool) {
	fd, err := unix.PidfdOpen(pid, flags)
	if err != nil {
		return -1, false
	}
	cg, err := proc.ReadCgroups(pid)
	if err != nil || cg[""] != path {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// Remove deletes the group's directories. The group must be empty: a
// group with processes in it is left alone (the kernel refuses). A group
// already gone is not an error.
func (g *Group) Remove() error {
	g.Close()
	var errs []error
	rm := func(dir string) {
		// A group whose last process has just exited can be busy for an
		// instant while the kernel finishes releasing it.
		var err error
		for i := range 50 {
			err = unix.Rmdir(dir)
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(time.Duration(i+1) * time.Millisecond)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	rm(g.m.dir(g.path))
	for c, p := range g.v1s() {
		rm(g.m.v1[c].dir(p))
	}
	// The subtree goes with its last group, so that a daemon killed with
	// no sandbox leaves nothing behind (Create makes it again).
	g.m.Prune()
	return errors.Join(errs...)
}

// Populated reports whether any process is in the group.
func (g *Group) Populated() (bool, error) {
	ev, err := readKeyed(filepath.Join(g.m.dir(g.path), "cgroup.events"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return ev["populated"] != 0, nil
}

// PIDs lists the processes in the group (its cgroup2 directory).
func (g *Group) PIDs() ([]int, error) {
	lines, err := readLines(filepath.Join(g.m.dir(g.path), "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(lines))
	for _, l := range lines {
		if pid, err := strconv.Atoi(l); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}
