package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native/isolate"
)

// execs are the commands a handle started that may still run: without a
// cgroup nothing else ends them with the sandbox.
type execs struct {
	mu  sync.Mutex
	set map[*proc.Process]bool
}

func (x *execs) add(p *proc.Process) {
	x.mu.Lock()
	if x.set == nil {
		x.set = map[*proc.Process]bool{}
	}
	x.set[p] = true
	x.mu.Unlock()
}

func (x *execs) remove(p *proc.Process) {
	x.mu.Lock()
	delete(x.set, p)
	x.mu.Unlock()
}

// kill ends every command still running, and its process group.
func (x *execs) kill() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for p := range x.set {
		_ = p.SignalGroup(unix.SIGKILL)
	}
}

// Exec runs spec in the sandbox: with the environment its leader started
// with (plus spec.Env), its marker, in its cgroup when it has one (so the
// sandbox's stop kills it with the rest), in a session of its own.
func (h *handle) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.Process, error) {
	if h.p == nil {
		return nil, fmt.Errorf("%w: the sandbox's leader is gone", runtime.ErrExecStart)
	}
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("%w: empty command", runtime.ErrExecStart)
	}
	env, err := h.p.Environ()
	if err != nil {
		return nil, fmt.Errorf("%w: read the sandbox's environment: %v", runtime.ErrExecStart, err)
	}
	env = withVars(env, spec.Env)
	if h.init != nil {
		return h.execInside(ctx, spec, env)
	}
	argv0, err := isolate.LookPath(spec.Argv[0], env)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %v", runtime.ErrExecStart, runtime.ErrProgramNotFound, err)
	}
	dir := h.execDir(spec)
	if !filepath.IsAbs(argv0) {
		// ./run.sh, bin/run.sh: from where the command runs, as a
		// shell and docker exec find it (not the daemon's directory).
		argv0 = filepath.Join(dir, argv0)
	}
	pipes, err := newStdio(spec)
	if err != nil {
		return nil, err
	}
	ps := proc.Spec{Argv: append([]string{argv0}, spec.Argv[1:]...), Env: env, Dir: dir, Marker: h.id.Marker, Stdio: pipes.child[:], Terminal: spec.TTY}
	if h.g != nil {
		e, err := h.g.Into()
		if err != nil {
			pipes.close()
			return nil, fmt.Errorf("%w: %v", runtime.ErrExecStart, err)
		}
		defer e.Close()
		ps.Cgroup = e
	}
	p, err := h.w.Spawn(ps)
	pipes.closeChild()
	if err != nil {
		pipes.closeParent()
		return nil, fmt.Errorf("%w: %v", runtime.ErrExecStart, err)
	}
	h.execs.add(p)
	x := &execProc{p: spawned{p}, Ending: runtime.NewEnding()}
	copied := pipes.copy(spec)
	go x.run(ctx, spec.Timeout, copied, pipes.closeOutputs, func() { h.execs.remove(p) })
	if pipes.pty != nil {
		return &terminal{execProc: x, pty: pipes.pty}, nil
	}
	return x, nil
}

// terminal is a command started with a terminal: the daemon holds its
// master side.
type terminal struct {
	*execProc
	pty *os.File
}

func (t *terminal) Resize(cols, rows int) error {
	cols, rows = runtime.TerminalSize(cols, rows)
	return pty.Setsize(t.pty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// withVars is env with vars set over it; MarkerEnv stays as it is.
func withVars(env, vars []string) []string {
	if len(vars) == 0 {
		return env
	}
	set := map[string]bool{}
	for _, kv := range vars {
		if k, _, ok := strings.Cut(kv, "="); ok && k != runtime.MarkerEnv {
			set[k] = true
		}
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	for _, kv := range vars {
		if k, _, _ := strings.Cut(kv, "="); set[k] {
			out = append(out, kv)
		}
	}
	return out
}

// execDir is where spec runs: its Dir, relative to the workspace, which
// is the same path inside an isolated sandbox as on the host.
func (h *handle) execDir(spec runtime.ExecSpec) string {
	switch {
	case spec.Dir == "":
		return h.Host
	case !filepath.IsAbs(spec.Dir):
		return filepath.Join(h.Host, spec.Dir)
	}
	return spec.Dir
}

// stdio are the pipes between the daemon and one command, or its
// terminal.
type stdio struct {
	child [3]*os.File // the command's stdin, stdout, stderr
	in    *os.File    // written to the command's stdin; nil: none
	out   [2]*os.File // read from its stdout and stderr
	pty   *os.File    // with a terminal: its master, which out[0] is too
}

func newStdio(spec runtime.ExecSpec) (*stdio, error) {
	if spec.TTY {
		return newTerminal(spec)
	}
	s := &stdio{}
	var err error
	if spec.Stdin == nil {
		s.child[0], err = os.Open(os.DevNull)
	} else {
		s.child[0], s.in, err = os.Pipe()
	}
	for i := range 2 {
		if err == nil && i == 1 && spec.Merged {
			s.child[2], err = dup(s.child[1]) // 2>&1: one pipe, in write order
			break
		}
		if err == nil {
			s.out[i], s.child[i+1], err = os.Pipe()
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// newTerminal is a new pseudo-terminal of spec's size, its one end the
// command's stdin, stdout and stderr.
func newTerminal(spec runtime.ExecSpec) (*stdio, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: open a terminal: %v", runtime.ErrExecStart, err)
	}
	cols, rows := runtime.TerminalSize(spec.Cols, spec.Rows)
	if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		master.Close()
		tty.Close()
		return nil, fmt.Errorf("%w: size a terminal: %v", runtime.ErrExecStart, err)
	}
	return &stdio{child: [3]*os.File{tty, tty, tty}, out: [2]*os.File{master}, pty: master}, nil
}

// dup is a second descriptor of f's open file.
func dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func (s *stdio) closeChild() {
	for _, f := range s.child {
		if f != nil {
			f.Close() // a terminal's one file thrice: closed once, then ErrClosed
		}
	}
}

// outputGrace is how long a command's output is read after it exits.
const outputGrace = time.Second

// closeOutputs ends the reading of the command's outputs.
func (s *stdio) closeOutputs() {
	for _, f := range s.out {
		if f != nil {
			f.Close()
		}
	}
}

func (s *stdio) close() {
	s.closeChild()
	s.closeParent()
}

// closeParent closes the daemon's ends of the pipes.
func (s *stdio) closeParent() {
	for _, f := range append([]*os.File{s.in}, s.out[:]...) {
		if f != nil {
			f.Close()
		}
	}
}

// copy feeds stdin and drains the outputs; the channel is closed when
// both outputs have reached their end (the command and whatever it left
// holding them are gone).
func (s *stdio) copy(spec runtime.ExecSpec) <-chan struct{} {
	if s.in != nil {
		go func() {
			_, _ = io.Copy(s.in, spec.Stdin)
			s.in.Close()
		}()
	}
	if s.pty != nil && spec.Stdin != nil {
		// The end of a terminal's input is not the end of the terminal:
		// the master stays open for its output.
		go func() { _, _ = io.Copy(s.pty, spec.Stdin) }()
	}
	var wg sync.WaitGroup
	for i, w := range []io.Writer{spec.Stdout, spec.Stderr} {
		if s.out[i] == nil { // merged into stdout
			continue
		}
		if w == nil {
			w = io.Discard
		}
		wg.Go(func() { _, _ = io.Copy(w, s.out[i]) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// started is a command as Exec follows it: a process of the daemon's,
// or one an isolated sandbox's init started.
type started interface {
	Done() <-chan struct{}
	kill() error
	exit() runtime.Exit
}

// spawned is a command the daemon spawned itself.
type spawned struct{ p *proc.Process }

func (s spawned) Done() <-chan struct{} { return s.p.Done() }
func (s spawned) exit() runtime.Exit    { return exitOf(s.p) }
func (s spawned) kill() error {
	if err := s.p.SignalGroup(unix.SIGKILL); err != nil && !errors.Is(err, proc.ErrExited) {
		return err
	}
	return nil
}

// execProc is one command started by Exec.
type execProc struct {
	p started
	*runtime.Ending
}

// run ends the command when ctx ends or its time is up, and says how it
// ended once it has and its output is copied.
func (x *execProc) run(ctx context.Context, timeout time.Duration, copied <-chan struct{}, cut, forget func()) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	reason := ""
	select {
	case <-x.p.Done():
	case <-ctx.Done():
		reason = "cancelled"
		_ = x.Kill()
	case <-expired:
		reason = runtime.ReasonTimeout
		_ = x.Kill()
	}
	<-x.p.Done()
	forget()
	// What the command left running in a session of its own may hold its
	// output open: what it writes after a moment is not waited for.
	select {
	case <-copied:
	case <-time.After(outputGrace):
	}
	cut()
	<-copied
	e := x.p.exit()
	e.Reason = reason
	x.End(e)
}

func (x *execProc) Kill() error { return x.p.kill() }
