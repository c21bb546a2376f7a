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
func (g *Group) Empty() (<-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watching {
		return g.empty, g.emptyErr
	}
	g.watching = true
	g.empty = make(chan struct{})
	w, err := g.m.watcher()
	if err == nil {
		err = w.add(g)
	}
	g.emptyErr = err
	return g.empty, err
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
// which may be at once. The caller holds g.mu.
func (w *emptyWatcher) add(g *Group) error {
	ew := &emptyWait{g: g}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
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
		return cerr
	case errors.Is(werr, unix.ENOENT):
		close(g.empty) // the group is gone, and so is everything in it
		return nil
	case werr != nil:
		return fmt.Errorf("inotify_add_watch %s: %w", events, werr)
	}
	w.mu.Lock()
	w.byWD[int32(wd)] = append(w.byWD[int32(wd)], ew)
	w.mu.Unlock()
	// Emptied before the wait was registered: no event will come.
	w.check(int32(wd))
	g.drain(func() { w.check(int32(wd)) })
	return nil
}

// maxDrained bounds the pidfds one group's drain holds; past it, inotify
// alone reports the end.
const maxDrained = 32

// drain waits on the pidfds of the group's members, each checked to be
// in the group after it was opened, and calls then once all have exited.
// inotify alone would do, but the kernel sends at most one cgroup.events
// notification per file per 10 ms (CGROUP_FILE_NOTIFY_MIN_INTV, 100 a
// second): a group killed soon after it filled is reported up to 10 ms
// late, while a pidfd reports its process's exit at once. inotify stays the authority:
// then only makes the watcher read the group again, and a member this
// read missed (a fork racing the kill) keeps it populated until its own
// event. Nothing waits where the runtime's poller cannot.
func (g *Group) drain(then func()) {
	pids, err := readLines(filepath.Join(g.m.dir(g.path), "cgroup.procs"))
	if err != nil || len(pids) == 0 || len(pids) > maxDrained {
		return
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
