// This file is long because one process's identity, pinning, signalling
// and waiting all go through the same pidfd and marker checks.

package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ExitStatus says how a process ended.
type ExitStatus struct {
	// Known is false for an adopted process: only its parent can learn its
	// status, and after a daemon restart that parent is not us.
	Known  bool
	Code   int            // exit code when Signal is 0
	Signal syscall.Signal // terminating signal, or 0
	// At is when the exit was seen (the pidfd became readable).
	At time.Time
}

// Process is one pinned process: our child, or one adopted after a restart.
type Process struct {
	id    Identity
	child bool // spawned by us: we reap it and learn its status
	w     *Watcher

	mu     sync.Mutex // guards pidfd use against close, reaped
	pidfd  int
	reaped bool // leader reaped (child) or seen gone (adopted); no group signals by pgid after this
	status ExitStatus
	onExit []func() // run once done is closed (OnExit)

	done chan struct{}
}

// Identity returns what proves this process is ours; persist it to adopt the
// process after a restart.
func (p *Process) Identity() Identity { return p.id }

// Done is closed once the process has exited: for a spawned child, after its
// group has been killed; for an adopted one, just before its leftovers are.
func (p *Process) Done() <-chan struct{} { return p.done }

// OnExit runs f on a goroutine of its own once Done is closed (at once if
// it is): what waits for an exit costs no goroutine while the process
// lives. f never runs if the watcher closes first.
func (p *Process) OnExit(f func()) {
	p.mu.Lock()
	if !p.reaped {
		p.onExit = append(p.onExit, f)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	<-p.done // reaped is set just before done is closed
	go f()
}

// Status returns how the process ended. It is meaningful after Done.
func (p *Process) Status() ExitStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// maxEnviron bounds what Environ reads.
const maxEnviron = 1 << 20

// Environ returns the process's initial environment, as KEY=VALUE
// entries, read while the process is pinned and checked to be its own
// (the marker it was spawned with is in it). Called right after Spawn, it
// waits out the end of the child's execve (see readEnviron). It returns
// ErrExited once the process is gone.
func (p *Process) Environ() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped || p.pidfd < 0 || pidfdReadable(p.pidfd) {
		return nil, ErrExited
	}
	b, err := readEnviron(p.id.PID, p.pidfd)
	switch {
	case errors.Is(err, ErrNotFound), len(b) == 0 && pidfdReadable(p.pidfd):
		return nil, ErrExited // it ended while being read: a zombie has no environment
	case err != nil:
		return nil, err
	case len(b) > maxEnviron:
		return nil, fmt.Errorf("environment of %d: more than %d bytes", p.id.PID, maxEnviron)
	case markerIn(b) != p.id.Marker:
		return nil, fmt.Errorf("%w: environment of %d lacks its marker", ErrIdentity, p.id.PID)
	}
	var out []string
	for _, kv := range strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00") {
		if kv != "" {
			out = append(out, kv)
		}
	}
	return out, nil
}

// SignalGroup sends sig to the process's whole group. It returns ErrExited
// once the leader is gone; the group's leftovers are then killed by the exit
// handling, not here.
//
// For a spawned child the group id is safe to signal until the leader is
// reaped, and reaping waits for p.mu. For an adopted process the pidfd is
// polled first: while the leader is alive its PID, and so the group id,
// cannot be reused.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped || p.pidfd < 0 {
		return ErrExited
	}
	if !p.child && pidfdReadable(p.pidfd) {
		return ErrExited
	}
	if err := unix.Kill(-p.id.PGID, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrExited
		}
		return fmt.Errorf("signal group %d: %w", p.id.PGID, err)
	}
	return nil
}

// Stop ends the process group: SIGTERM to the group, up to grace for the
// leader to exit, then SIGKILL to the group. A grace of zero or less sends
// SIGKILL at once. Stop returns when the process has exited and its group has
// been killed, or when ctx ends first.
func (p *Process) Stop(ctx context.Context, grace time.Duration) (ExitStatus, error) {
	if grace > 0 {
		if err := p.SignalGroup(unix.SIGTERM); err != nil && !errors.Is(err, ErrExited) {
			return ExitStatus{}, err
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return p.Status(), nil
		case <-t.C:
		case <-ctx.Done():
			return ExitStatus{}, ctx.Err()
		}
	}
	if err := p.SignalGroup(unix.SIGKILL); err != nil && !errors.Is(err, ErrExited) {
		return ExitStatus{}, err
	}
	select {
	case <-p.done:
		return p.Status(), nil
	case <-ctx.Done():
		return ExitStatus{}, ctx.Err()
	}
}

// finish runs on the watcher goroutine once the pidfd is readable: the leader
// has exited. For our child it kills what is left of the group, reaps the
// leader, releases the pidfd and closes done. For an adopted process it
// closes done first and then kills leftovers found by marker.
func (p *Process) finish() {
	at := time.Now()
	p.mu.Lock()
	if p.child {
		// The leader is a zombie until reaped, so its PGID cannot have been
		// reused: the group kill reaches only its own members.
		_ = unix.Kill(-p.id.PGID, unix.SIGKILL)
		var si siginfoChild
		err := unix.Waitid(unix.P_PIDFD, p.pidfd, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WEXITED, nil)
		if err == nil {
			p.status = si.status()
		}
	}
	p.status.At = at
	p.reaped = true
	_ = unix.Close(p.pidfd)
	p.pidfd = -1
	hooks := p.onExit
	p.onExit = nil
	p.mu.Unlock()
	close(p.done)
	for _, f := range hooks {
		go f()
	}
	if len(hooks) > 0 {
		// The hooks wait on this processor, behind the watcher's next
		// epoll_wait, until the runtime takes it back: let them run now.
		goruntime.Gosched()
	}
	if !p.child && unix.Kill(-p.id.PGID, 0) == nil && p.w != nil {
		// Something is left in a group whose id may have been reused (or
		// the leader is a zombie its new parent has not reaped yet): find
		// our leftovers by marker. This scans /proc, so it runs after
		// Done and off the epoll loop: exits are reported first.
		p.w.sweeps.Go(func() { p.w.KillMarked(p.id.Marker) })
	}
}

// siginfoChild is the SIGCHLD layout of siginfo_t on Linux.
type siginfoChild struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	Uid    uint32
	Status int32
	_      [100]byte
}

const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

func (si *siginfoChild) status() ExitStatus {
	switch si.Code {
	case cldExited:
		return ExitStatus{Known: true, Code: int(si.Status)}
	case cldKilled, cldDumped:
		return ExitStatus{Known: true, Signal: syscall.Signal(si.Status), Code: 128 + int(si.Status)}
	}
	return ExitStatus{}
}

func pidfdReadable(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// KillMarked sends SIGKILL to every process that carries one of markers,
// in one pass over /proc, and returns how many it signalled. It finds
// children spawned just before a daemon died, whose identity never reached
// disk, and the leftovers of ones whose leader is gone. Each candidate is
// pinned with a pidfd and its marker read again before the signal; a
// process without one of the markers is never signalled.
func KillMarked(markers ...string) (int, error) {
	want := make(map[string]bool, len(markers))
	for _, m := range markers {
		if m != "" {
			want[m] = true
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	pids, err := markedPIDs(want)
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, pid := range pids {
		if killIfMarked(pid, want) {
			killed++
		}
	}
	return killed, nil
}

// markedPIDs lists the processes (but this one) that carry one of want's
// markers, in one pass over /proc, as read: nothing is pinned.
func markedPIDs(want map[string]bool) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if m, err := readMarker(pid, -1); err == nil && want[m] {
			out = append(out, pid)
		}
	}
	return out, nil
}

// killIfMarked kills pid, found marked, if it still carries one of want's
// markers once pinned.
func killIfMarked(pid int, want map[string]bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	// Pinned: look again, then signal.
	if m, err := readMarker(pid, fd); err != nil || !want[m] {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// Spec describes a process to spawn.
type Spec struct {
	Argv []string // Argv[0] is looked up in PATH, unless Path is set
	// Path, when set, is the program run; Argv[0] is then only its name.
	Path   string
	Env    []string // the whole environment, KEY=VALUE; MarkerEnv is added
	Dir    string
	Stdout string // appended to, created 0600
	Stderr string // appended to, created 0600
	// Stdio, when set, are the child's stdin, stdout and stderr instead
	// of /dev/null and the two logs (pipes of an exec); the caller
	// closes them after Spawn.
	Stdio []*os.File
	// Terminal makes Stdio[0], a terminal, the child's controlling
	// terminal in its new session (a shell's job control needs one).
	Terminal bool
	Marker   string // unique per process; recorded in Identity
	// Cgroup, when set, places the child in its cgroups at birth: no
	// instant of its life is spent outside them.
	Cgroup Placement
	// ExtraFiles are the child's descriptors 3 and on; the caller
	// closes them after Spawn.
	ExtraFiles []*os.File
	// Namespaces, when set, starts the child in new namespaces.
	Namespaces *Namespaces
}

// Namespaces are new namespaces for a child: Flags are CLONE_NEW*
// flags; with CLONE_NEWUSER the child's uid and gid inside are mapped to
// the daemon's own (and setgroups is denied, as an unprivileged user's
// namespace must).
type Namespaces struct {
	Flags    uintptr
	UID, GID int // inside
}

// Placement puts a child into its cgroups as it is created (package
// cgroup provides one).
type Placement interface {
	// FD is an open directory of the cgroup2 hierarchy that the child is
	// cloned into (clone3 with CLONE_INTO_CGROUP).
	FD() int
	// Path is that cgroup's path as /proc/<pid>/cgroup shows it. It is
	// recorded in Identity and verified on Adopt.
	Path() string
	// Enter moves the calling thread, locked to its OS thread, into any
	// other cgroups the child must be born in (cgroup v1 hierarchies on a
	// hybrid machine: a child inherits the cgroups of the thread that
	// forks it), and returns how to move it back, which proc calls only
	// for the main thread: any other ends after the fork. leave is
	// returned even with an error, to undo a partial move.
	Enter() (leave func() error, err error)
	// NeedsThread reports whether Enter has anything to do. When not, the
	// child is cloned into its cgroup from the calling thread: no thread
	// is locked, moved or ended for it.
	NeedsThread() bool
}

// openLog opens a log for the child to append to. A link in its place is
// refused (O_NOFOLLOW), a FIFO cannot block the open (O_NONBLOCK; the flag
// is cleared again so the child writes as usual), and the file must be
// regular and is made 0600 whatever the umask.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = clearNonblock(f)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}

func spawnFiles(spec Spec) (files []*os.File, err error) {
	if spec.Stdio != nil {
		if len(spec.Stdio) != 3 {
			return nil, errors.New("stdio: want stdin, stdout and stderr")
		}
		return nil, nil
	}
	defer func() {
		if err != nil {
			closeAll(files)
		}
	}()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	files = append(files, null)
	for _, path := range []string{spec.Stdout, spec.Stderr} {
		f, err := openLog(path)
		if err != nil {
			return files, fmt.Errorf("open log: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// fds are the descriptors of the child's stdio: stdio when set, else
// files.
func fds(files, stdio []*os.File) []uintptr {
	if stdio != nil {
		files = stdio
	}
	return []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// spawn starts spec detached: a new session and process group, stdin from
// /dev/null, stdout and stderr appended to files. It returns the pinned,
// identified process.
func spawn(spec Spec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("empty command")
	}
	if spec.Marker == "" {
		return nil, errors.New("empty marker")
	}
	path := spec.Path
	if path == "" {
		var err error
		if path, err = exec.LookPath(spec.Argv[0]); err != nil {
			return nil, err
		}
	}
	boot, err := BootID()
	if err != nil {
		return nil, err
	}
	files, err := spawnFiles(spec)
	if err != nil {
		return nil, err
	}
	defer closeAll(files)
	// The marker is ours alone: any other MarkerEnv entry is dropped.
	env := make([]string, 0, len(spec.Env)+1)
	for _, kv := range spec.Env {
		if !strings.HasPrefix(kv, MarkerEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, MarkerEnv+"="+spec.Marker)
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   env,
		Files: fds(files, spec.Stdio),
		Sys:   &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd},
	}
	withSpec(attr, spec)
	pid, err := forkExec(path, spec, attr)
	if err != nil {
		return nil, err
	}
	if pidfd < 0 {
		// The kernel has no pidfds (before 5.3). We cannot pin the child;
		// kill it rather than run it unsupervised.
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return nil, errors.New("kernel does not support pidfds (Linux 5.3 or newer is required)")
	}
	p := &Process{
		id:    Identity{PID: pid, PGID: pid, BootID: boot, Marker: spec.Marker},
		child: true,
		pidfd: pidfd,
		done:  make(chan struct{}),
	}
	// The child cannot be reaped without us, so its stat is readable even if
	// it has already exited (as a zombie).
	st, err := readStat(pid)
	if err != nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
		var si siginfoChild
		_ = unix.Waitid(unix.P_PIDFD, pidfd, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WEXITED, nil)
		unix.Close(pidfd)
		return nil, fmt.Errorf("read child stat: %w", err)
	}
	p.id.StartTime = st.startTime
	if spec.Cgroup != nil {
		p.id.Cgroup = spec.Cgroup.Path()
	}
	return p, nil
}

// withSpec adds to attr what spec asks of the child besides its stdio:
// a controlling terminal, more descriptors, new namespaces.
func withSpec(attr *syscall.ProcAttr, spec Spec) {
	if spec.Terminal {
		attr.Sys.Setctty, attr.Sys.Ctty = true, 0
	}
	for _, f := range spec.ExtraFiles {
		attr.Files = append(attr.Files, f.Fd())
	}
	if ns := spec.Namespaces; ns != nil {
		attr.Sys.Cloneflags = ns.Flags
		if ns.Flags&unix.CLONE_NEWUSER != 0 {
			attr.Sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: ns.UID, HostID: os.Geteuid(), Size: 1}}
			attr.Sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: ns.GID, HostID: os.Getegid(), Size: 1}}
			attr.Sys.GidMappingsEnableSetgroups = false
		}
	}
}

// forkExec starts the child, in spec.Cgroup when it is set.
func forkExec(path string, spec Spec, attr *syscall.ProcAttr) (int, error) {
	if spec.Cgroup == nil {
		return syscall.ForkExec(path, spec.Argv, attr)
	}
	attr.Sys.UseCgroupFD = true
	attr.Sys.CgroupFD = spec.Cgroup.FD()
	if !spec.Cgroup.NeedsThread() {
		return syscall.ForkExec(path, spec.Argv, attr)
	}
	// The child inherits the cgroups of the thread that forks it. The fork
	// runs on a goroutine locked to its thread: the thread enters the
	// child's cgroups, forks, and ends with the goroutine, so it never
	// runs anything else from inside them (and a move costs a cgroup-wide
	// lock: none is spent moving back). The main thread cannot end (Go
	// wedges it instead): it moves back.
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		var r result
		leave, err := spec.Cgroup.Enter()
		if err != nil {
			r.err = fmt.Errorf("enter cgroup: %w", err)
		} else {
			r.pid, r.err = syscall.ForkExec(path, spec.Argv, attr)
		}
		if unix.Gettid() == unix.Getpid() && leave() == nil {
			goruntime.UnlockOSThread()
		}
		done <- r
	}()
	r := <-done
	return r.pid, r.err
}

// adopt pins the process id names and verifies it is ours.
func adopt(id Identity) (*Process, error) {
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	if err := verify(id, fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Verified after pinning: fd refers to our process, alive a moment ago.
	return &Process{id: id, pidfd: fd, done: make(chan struct{})}, nil
}
