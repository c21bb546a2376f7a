package proc

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Watcher spawns and adopts processes and notices their exits. One goroutine
// waits in epoll on every pidfd at once, so a thousand children cost one
// thread, and an exit is seen the moment the kernel reports it, whoever holds
// the child's stdout.
type Watcher struct {
	epfd   int
	wakefd int // eventfd that interrupts epoll_wait on Close

	mu     sync.Mutex
	procs  map[int32]*Process // by pidfd
	closed bool

	stopped chan struct{}
	sweeps  sync.WaitGroup // leftover sweeps of adopted processes

	sweepMu   sync.Mutex
	nextSweep *sweep                               // gathering markers for the scan after the running one
	sweeping  bool                                 // a goroutine runs the scans (KillMarked)
	scan      func(markers ...string) (int, error) // the package's KillMarked; a test's stand-in
}

// NewWatcher starts the epoll loop. Close stops it.
func NewWatcher() (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	w := &Watcher{epfd: epfd, wakefd: wakefd, procs: map[int32]*Process{}, stopped: make(chan struct{}), scan: KillMarked}
	go w.loop()
	return w, nil
}

// Closed is closed once Close has stopped the watcher: from then on no
// exit is seen, and Done channels that are still open stay open.
func (w *Watcher) Closed() <-chan struct{} { return w.stopped }

// ErrClosed is returned by Spawn and Adopt after Close.
var ErrClosed = errors.New("watcher closed")

// Spawn starts spec detached and watches it.
func (w *Watcher) Spawn(spec Spec) (*Process, error) {
	p, err := spawn(spec)
	if err != nil {
		return nil, err
	}
	if err := w.watch(p); err != nil {
		// Not watched means not supervised: kill and reap it.
		p.finish()
		return nil, err
	}
	return p, nil
}

// Adopt pins and verifies the process id describes and watches it. It
// returns ErrNotFound when no process has the PID (or it was recorded in an
// earlier boot), ErrExited when it has exited, and an error wrapping ErrIdentity when the PID belongs to another
// process; in none of these cases is anything signalled.
func (w *Watcher) Adopt(id Identity) (*Process, error) {
	p, err := adopt(id)
	if err != nil {
		return nil, err
	}
	if err := w.watch(p); err != nil {
		unix.Close(p.pidfd)
		return nil, err
	}
	return p, nil
}

func (w *Watcher) watch(p *Process) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	p.w = w
	w.procs[int32(p.pidfd)] = p
	// Level-triggered: a pidfd that became readable before it was added is
	// reported by the first epoll_wait.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.pidfd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, p.pidfd, &ev); err != nil {
		delete(w.procs, int32(p.pidfd))
		return fmt.Errorf("epoll_ctl add: %w", err)
	}
	return nil
}

func (w *Watcher) loop() {
	defer close(w.stopped)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// epoll_wait fails only on a programming error; there is no way
			// to go on watching.
			panic(fmt.Sprintf("proc: epoll_wait: %v", err))
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == w.wakefd {
				return
			}
			w.mu.Lock()
			p := w.procs[ev.Fd]
			delete(w.procs, ev.Fd)
			if p != nil {
				_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
			}
			w.mu.Unlock()
			if p != nil {
				p.finish()
			}
		}
	}
}

// Close stops watching. Watched processes keep running (they are detached by
// design) and their pidfds are released; their Done channels stay open.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	var one = [8]byte{1}
	if _, err := unix.Write(w.wakefd, one[:]); err != nil {
		return fmt.Errorf("wake epoll loop: %w", err)
	}
	<-w.stopped
	w.sweeps.Wait()
	w.mu.Lock()
	for fd, p := range w.procs {
		p.mu.Lock()
		unix.Close(p.pidfd)
		p.pidfd = -1
		p.mu.Unlock()
		delete(w.procs, fd)
	}
	w.mu.Unlock()
	unix.Close(w.wakefd)
	return unix.Close(w.epfd)
}

// KillMarked is KillMarked for many callers at once: the markers asked
// for while a scan of /proc runs are gathered and scanned for together
// by the next, so that a burst of exits (500 sandboxes stopped at once)
// reads /proc a few times, not once per exit. It returns once a scan
// that began after the call has killed every process marked with
// marker.
func (w *Watcher) KillMarked(marker string) {
	w.sweepMu.Lock()
	if w.nextSweep == nil {
		w.nextSweep = &sweep{done: make(chan struct{})}
	}
	sw := w.nextSweep
	sw.markers = append(sw.markers, marker)
	if !w.sweeping {
		w.sweeping = true
		go w.runSweeps()
	}
	w.sweepMu.Unlock()
	<-sw.done
}

// sweep is one scan of /proc for the markers gathered before it began.
type sweep struct {
	markers []string
	done    chan struct{}
}

func (w *Watcher) runSweeps() {
	for {
		w.sweepMu.Lock()
		sw := w.nextSweep
		w.nextSweep = nil
		if sw == nil {
			w.sweeping = false
			w.sweepMu.Unlock()
			return
		}
		w.sweepMu.Unlock()
		_, _ = w.scan(sw.markers...)
		close(sw.done)
	}
}
