package cgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Empty returns a channel closed once no process is left in the group
// (cgroup.events says "populated 0"). The kernel reports the change
// through inotify, which one goroutine per Manager reads: nothing polls.
func (g *Group) Empty() (<-chan struct{}, error) { return g.watchEmpty(nil) }

// End kills every process in the group and returns a channel closed once
// it is empty: Kill, then Empty. The members are first pinned with
// pidfds (up to maxDrained), and the group is read again once all of
// them have exited (see drain).
func (g *Group) End() (<-chan struct{}, error) {
	members := g.pin()
	if err := g.Kill(); err != nil {
		closeFiles(members)
		return nil, err
	}
	return g.watchEmpty(members)
}

// watchEmpty is Empty, with the group's members pinned to drain; it owns
// members, and closes those it does not drain (the group was watched
// already, or cannot be).
func (g *Group) watchEmpty(members []*os.File) (<-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.watching {
		g.watching = true
		g.empty = make(chan struct{})
		w, err := g.m.watcher()
		var recheck func()
		if err == nil {
			recheck, err = w.add(g)
		}
		g.emptyErr = err
		if recheck != nil {
			drain(members, recheck)
			members = nil
		}
	}
	closeFiles(members)
	return g.empty, g.emptyErr
}

// emptyWatcher reads one inotify instance that watches the cgroup.events
// file of every group someone waits on.
type emptyWatcher struct {
	f *os.File

	mu sync.Mutex
	// byWD holds the waits of each watch: two Groups of one cgroup (an
	// adopted sandbox's, and a sweep's) share its watch descriptor.
	byWD map[int32][]*emptyWait
}

type emptyWait struct {
	g    *Group
	once sync.Once
}

func (m *Manager) watcher() (*emptyWatcher, error) {
	m.watchOnce.Do(func() {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			m.watchErr = fmt.Errorf("inotify_init1: %w", err)
			return
		}
		// Non-blocking, so reads park in the runtime's poller and Close
		// ends them.
		w := &emptyWatcher{f: os.NewFile(uintptr(fd), "inotify"), byWD: map[int32][]*emptyWait{}}
		m.watch = w
		go w.loop()
	})
	return m.watch, m.watchErr
}

// add watches g's cgroup.events and closes g.empty once it is empty,
// which may be at once. It returns what reads the group again for the
// watch (nil when there is none: the group is gone). The caller holds
// g.mu.
func (w *emptyWatcher) add(g *Group) (recheck func(), err error) {
	ew := &emptyWait{g: g}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var wd int
	var werr error
	events := filepath.Join(g.m.dir(g.path), "cgroup.events")
	// Not under w.mu: on cgroupfs the call can wait on the kernel's
	// cgroup locks while other groups are made and removed (milliseconds
	// each with hundreds at once), and every create would queue behind
	// the slowest. An event the loop reads before the wait is registered
	// finds no wait; the check below reads what it would have said.
	cerr := rc.Control(func(fd uintptr) {
		wd, werr = unix.InotifyAddWatch(int(fd), events, unix.IN_MODIFY)
	})
	switch {
	case cerr != nil:
		return nil, cerr
	case errors.Is(werr, unix.ENOENT):
		close(g.empty) // the group is gone, and so is everything in it
		return nil, nil
	case werr != nil:
		return nil, fmt.Errorf("inotify_add_watch %s: %w", events, werr)
	}
	w.mu.Lock()
	w.byWD[int32(wd)] = append(w.byWD[int32(wd)], ew)
	w.mu.Unlock()
	// Emptied before the wait was registered: no event will come.
	recheck = func() { w.check(int32(wd)) }
	recheck()
	return recheck, nil
}

// maxDrained bounds the pidfds one group's end holds; past it, inotify
// alone reports the end.
const maxDrained = 32

// pin opens a pidfd on each of the group's members, each checked to be in
// the group once pinned; none when there are more than maxDrained.
func (g *Group) pin() []*os.File {
	pids, err := readLines(filepath.Join(g.m.dir(g.path), "cgroup.procs"))
	if err != nil || len(pids) > maxDrained {
		return nil
	}
	var members []*os.File
	for _, s := range pids {
		pid, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		if fd, ok := openMember(pid, g.path, unix.PIDFD_NONBLOCK); ok {
			members = append(members, os.NewFile(uintptr(fd), "pidfd"))
		}
	}
	return members
}

// drain waits on members' pidfds, closing each, and calls then once all
// have exited. inotify alone would do, but the kernel sends at most one
// cgroup.events notification per file per 10 ms
// (CGROUP_FILE_NOTIFY_MIN_INTV, 100 a second): a group killed soon after
// it filled is reported up to 10 ms late, while a pidfd reports its
// process's exit at once. The members are pinned before the kill: a
// dying process leaves cgroup.procs before the group stops being
// populated. inotify stays the authority: then only makes the watcher
// read the group again, and a member the pin missed (a fork racing it)
// keeps the group populated until its own event. Nothing waits where the
// runtime's poller cannot.
func drain(members []*os.File, then func()) {
	if len(members) == 0 {
		return
	}
	go func() {
		exited := true
		for _, f := range members {
			exited = exited && awaitExit(f)
			f.Close()
		}
		if exited {
			then()
		}
	}()
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// awaitExit parks until the pidfd f is readable (its process has exited),
// in the runtime's poller. It reports false where f cannot be polled.
func awaitExit(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		return err == nil && n > 0
	}) == nil
}

// check closes the channels of watch wd's groups, and drops the watch,
// if the cgroup is empty.
func (w *emptyWatcher) check(wd int32) {
	w.mu.Lock()
	waits := w.byWD[wd]
	w.mu.Unlock()
	if len(waits) == 0 {
		return
	}
	if populated, err := waits[0].g.Populated(); err == nil && populated {
		return
	}
	w.done(wd, true)
}

// done closes the channels of watch wd's groups and forgets the watch,
// removing it from the kernel unless the kernel did (IN_IGNORED).
func (w *emptyWatcher) done(wd int32, rm bool) {
	w.mu.Lock()
	waits := w.byWD[wd]
	delete(w.byWD, wd)
	w.mu.Unlock()
	if rm && len(waits) > 0 {
		if rc, err := w.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
		}
	}
	for _, ew := range waits {
		ew.once.Do(func() { close(ew.g.empty) })
	}
}

func (w *emptyWatcher) loop() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 {
				// Events were lost: look at every watched group again.
				w.mu.Lock()
				wds := slices.Collect(maps.Keys(w.byWD))
				w.mu.Unlock()
				for _, wd := range wds {
					w.check(wd)
				}
				continue
			}
			if mask&unix.IN_IGNORED != 0 {
				// The group was removed: empty by definition.
				w.done(wd, false)
				continue
			}
			w.check(wd)
		}
	}
}

func (w *emptyWatcher) close() { w.f.Close() }
