package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
)

// The toolbox: commands, files and shell sessions inside a running
// sandbox, through its runtime (Execer, Files), so that what it starts is
// in the sandbox (its cgroup and marker, its container) and ends with it.

// Bounds of the toolbox: commands running at once (a session's shell is
// one) per sandbox and in all, sessions per sandbox and in all, and the
// output all sessions keep of their commands (past it, the oldest
// finished command's output is dropped; a running command keeps at most
// shell.MaxOutput per stream, so sessions hold at most MaxSessionOutput
// and 3 MiB for each session).
const (
	MaxExecsPerSandbox    = 16
	MaxExecs              = 256
	MaxSessionsPerSandbox = 8
	MaxSessions           = 32
	MaxSessionOutput      = 64 << 20
)

// ErrBusy: a bound of the toolbox is reached; try again when something
// has ended.
var ErrBusy = errors.New("too many commands at once")

// nonInteractive is childenv.NonInteractive as an exec's variables, made
// once: every command gets it.
var nonInteractive = childenv.List(childenv.NonInteractive)

// toolbox is the supervisor's count of running commands and the
// sessions of each sandbox.
type toolbox struct {
	mu       sync.Mutex
	running  int
	per      map[string]int
	sessions map[string]map[string]*shell.Session // sandbox id → session id → (nil while it starts)
	count    int                                  // sessions in all, those starting too
	budget   *shell.Budget
}

// Exec runs spec inside a running sandbox and counts as activity. The
// command is bounded (ErrBusy past MaxExecsPerSandbox or MaxExecs), gets
// childenv.NonInteractive unless spec asks for a terminal, and ends when
// ctx does, after spec.Timeout, or when the sandbox stops. A runtime that
// cannot run commands is ErrUnsupportedRuntime.
func (s *Supervisor) Exec(ctx context.Context, id string, spec runtime.ExecSpec) (runtime.Process, error) {
	e, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	ex, ok := h.(runtime.Execer)
	if !ok {
		return nil, fmt.Errorf("%w: the %s runtime cannot run commands in its sandboxes", ErrUnsupportedRuntime, e.info.Runtime)
	}
	if err := s.tools.acquire(id); err != nil {
		return nil, err
	}
	if !spec.TTY {
		spec.Env = append(slices.Clone(nonInteractive), spec.Env...)
	}
	p, err := ex.Exec(ctx, spec)
	if err != nil {
		s.tools.release(id)
		if errors.Is(err, runtime.ErrExecStart) && !errors.Is(err, runtime.ErrProgramNotFound) {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nil, err
	}
	go func() {
		p.Wait(context.Background()) // it ends: by itself, ctx, its timeout or the stop
		s.tools.release(id)
	}()
	_ = s.RefreshActivity(id)
	return p, nil
}

// Files are the files of a running sandbox, as its workload sees them,
// for one operation of one caller: its first change (a write, mkdir,
// remove, rename or chmod that succeeds) counts as activity, once;
// reading does not. A runtime that cannot reach them is
// ErrUnsupportedRuntime.
func (s *Supervisor) Files(id string) (runtime.Files, error) {
	e, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	f, ok := h.(runtime.Files)
	if !ok {
		return nil, fmt.Errorf("%w: the %s runtime cannot reach its sandboxes' files", ErrUnsupportedRuntime, e.info.Runtime)
	}
	return &activeFiles{Files: f, touch: func() { _ = s.RefreshActivity(id) }}, nil
}

// StoredFiles are a sandbox's files whether it runs or not: a running
// one's as Files gives them, else (stopped, or starting before its
// workload exists) its workspace where its runtime keeps it on this
// machine (runtime.AtRest), as docker cp reaches a stopped container's.
// Changing the files of one that does not run is no activity.
func (s *Supervisor) StoredFiles(id string) (runtime.Files, error) {
	f, err := s.Files(id)
	if !errors.Is(err, ErrNotRunning) {
		return f, err
	}
	e, rt, lerr := s.runtimeOf(id)
	if lerr != nil {
		return nil, lerr
	}
	ar, ok := rt.(runtime.AtRest)
	if !ok {
		return nil, err
	}
	return ar.FilesAtRest(filepath.Join(e.dir, WorkspaceDir)), nil
}

// activeFiles are a sandbox's files whose first change is activity.
type activeFiles struct {
	runtime.Files
	once  sync.Once
	touch func()
}

func (f *activeFiles) changed(err error) error {
	if err == nil {
		f.once.Do(f.touch)
	}
	return err
}

func (f *activeFiles) Write(ctx context.Context, name string, r io.Reader, perm fs.FileMode) (int64, error) {
	n, err := f.Files.Write(ctx, name, r, perm)
	return n, f.changed(err)
}

func (f *activeFiles) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	return f.changed(f.Files.Mkdir(ctx, name, perm))
}

func (f *activeFiles) Remove(ctx context.Context, name string, recursive bool) error {
	return f.changed(f.Files.Remove(ctx, name, recursive))
}

func (f *activeFiles) Rename(ctx context.Context, from, to string) error {
	return f.changed(f.Files.Rename(ctx, from, to))
}

func (f *activeFiles) Symlink(ctx context.Context, target, name string) error {
	return f.changed(f.Files.Symlink(ctx, target, name))
}

func (f *activeFiles) Chmod(ctx context.Context, name string, perm fs.FileMode) error {
	return f.changed(f.Files.Chmod(ctx, name, perm))
}

// liveHandle is a running sandbox's entry and handle.
func (s *Supervisor) liveHandle(id string) (*sandbox, runtime.Handle, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	st, h := e.info.State, e.handle
	s.mu.Unlock()
	if !st.Live() || h == nil {
		return nil, nil, fmt.Errorf("%w: %s is %s", ErrNotRunning, Clip(id, MaxQuoted), st)
	}
	return e, h, nil
}

func (t *toolbox) acquire(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.per == nil {
		t.per = map[string]int{}
	}
	switch {
	case t.per[id] >= MaxExecsPerSandbox:
		return fmt.Errorf("%w: %d commands run in %s already (at most %d per sandbox)", ErrBusy, t.per[id], Clip(id, MaxQuoted), MaxExecsPerSandbox)
	case t.running >= MaxExecs:
		return fmt.Errorf("%w: %d commands run already (at most %d in all)", ErrBusy, t.running, MaxExecs)
	}
	t.per[id]++
	t.running++
	return nil
}

func (t *toolbox) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.per[id]--; t.per[id] <= 0 {
		delete(t.per, id)
	}
}

// CreateSession starts a shell session named sid in a running sandbox; it
// runs until DeleteSession or the sandbox's stop. A name in use is
// ErrConflict; past MaxSessionsPerSandbox or MaxSessions, ErrBusy. The
// place is taken under the lock that counts, before the shell starts, so
// that creates at once cannot pass the bounds together.
func (s *Supervisor) CreateSession(id, sid string) (*shell.Session, error) {
	if !validName(sid) {
		return nil, invalid("session id %q must match %s", Clip(sid, MaxQuoted), nameRE)
	}
	if _, _, err := s.liveHandle(id); err != nil {
		return nil, err // nothing is kept for a sandbox that is not running
	}
	if err := s.tools.reserve(id, sid); err != nil {
		return nil, err
	}
	sess, err := shell.New(sid, func(stdin io.Reader, stdout, stderr io.Writer) (runtime.Process, error) {
		return s.Exec(context.Background(), id, runtime.ExecSpec{Argv: shell.Argv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	}, s.tools.budget)
	s.tools.mu.Lock()
	defer s.tools.mu.Unlock()
	if err != nil {
		s.tools.dropLocked(id, sid)
		return nil, err
	}
	if sess0, ok := s.tools.sessions[id][sid]; !ok || sess0 != nil { // the sandbox went meanwhile
		go sess.Close()
		return nil, fmt.Errorf("%w: %s stopped while the session started", ErrNotRunning, Clip(id, MaxQuoted))
	}
	s.tools.sessions[id][sid] = sess
	return sess, nil
}

// reserve takes sid's place among sandbox id's sessions.
func (t *toolbox) reserve(id, sid string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.liveLocked(id)
	if _, taken := live[sid]; taken {
		return fmt.Errorf("%w: session %s exists in %s", ErrConflict, sid, Clip(id, MaxQuoted))
	}
	if len(live) >= MaxSessionsPerSandbox {
		return fmt.Errorf("%w: %s has %d sessions (at most %d); delete one first", ErrBusy, Clip(id, MaxQuoted), len(live), MaxSessionsPerSandbox)
	}
	if t.count >= MaxSessions {
		return fmt.Errorf("%w: %d sessions run (at most %d in all); delete one first", ErrBusy, t.count, MaxSessions)
	}
	if t.sessions == nil {
		t.sessions = map[string]map[string]*shell.Session{}
	}
	if t.sessions[id] == nil {
		t.sessions[id] = map[string]*shell.Session{}
	}
	t.sessions[id][sid] = nil
	t.count++
	return nil
}

// dropLocked forgets session sid of sandbox id, and the sandbox's map
// with its last session.
func (t *toolbox) dropLocked(id, sid string) {
	m := t.sessions[id]
	if _, ok := m[sid]; !ok {
		return
	}
	delete(m, sid)
	t.count--
	if len(m) == 0 {
		delete(t.sessions, id)
	}
}

// Sessions lists a sandbox's sessions that still run, by name.
func (s *Supervisor) Sessions(id string) ([]*shell.Session, error) {
	if _, err := s.lookup(id); err != nil {
		return nil, err
	}
	s.tools.mu.Lock()
	defer s.tools.mu.Unlock()
	var out []*shell.Session
	for _, sess := range s.tools.liveLocked(id) {
		if sess != nil {
			out = append(out, sess)
		}
	}
	slices.SortFunc(out, func(a, b *shell.Session) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Session finds a session that still runs (ErrNotFound otherwise).
func (s *Supervisor) Session(id, sid string) (*shell.Session, error) {
	if _, err := s.lookup(id); err != nil {
		return nil, err
	}
	s.tools.mu.Lock()
	defer s.tools.mu.Unlock()
	sess := s.tools.liveLocked(id)[sid]
	if sess == nil {
		return nil, fmt.Errorf("%w: no session %s in %s", ErrNotFound, Clip(sid, MaxQuoted), Clip(id, MaxQuoted))
	}
	return sess, nil
}

// DeleteSession ends a session and what runs in it; it counts as
// activity.
func (s *Supervisor) DeleteSession(id, sid string) error {
	sess, err := s.Session(id, sid)
	if err != nil {
		return err
	}
	sess.Close()
	s.tools.mu.Lock()
	if s.tools.sessions[id][sid] == sess {
		s.tools.dropLocked(id, sid)
	}
	s.tools.mu.Unlock()
	_ = s.RefreshActivity(id)
	return nil
}

// SessionRun runs line in session sid of sandbox id, in the shell that
// ran the lines before it; it counts as activity. Its output is read with
// CommandOutput or FollowCommand, redacted.
func (s *Supervisor) SessionRun(id, sid, line string) (*shell.Command, error) {
	sess, err := s.Session(id, sid)
	if err != nil {
		return nil, err
	}
	c, err := sess.Run(line)
	if err != nil {
		return nil, err
	}
	_ = s.RefreshActivity(id)
	return c, nil
}

// SessionInput sends data to the input of command cid in session sid;
// it counts as activity.
func (s *Supervisor) SessionInput(id, sid, cid, data string) error {
	sess, err := s.Session(id, sid)
	if err != nil {
		return err
	}
	if err := sess.Input(cid, data); err != nil {
		return err
	}
	_ = s.RefreshActivity(id)
	return nil
}

// CommandOutput is what a session's command has written so far.
type CommandOutput struct {
	// Stdout, Stderr and Merged (both, in the order read) are tails,
	// redacted as the sandbox's logs are.
	Stdout, Stderr, Merged string
	Cut                    bool // a tail was cut
}

// CommandOutput is what command c of a session of sandbox id has
// written so far, redacted.
func (s *Supervisor) CommandOutput(id string, c *shell.Command) CommandOutput {
	red := s.Redactor(id)
	o, e, m, cut := c.Logs()
	return CommandOutput{Stdout: red.Redact(o), Stderr: red.Redact(e), Merged: red.Redact(m), Cut: cut}
}

// FollowCommand passes emit what command c of a session of sandbox id has
// written and writes next, each piece redacted, until it has ended or
// ctx ends.
func (s *Supervisor) FollowCommand(ctx context.Context, id string, c *shell.Command, emit func(stderr bool, text string) error) error {
	red := s.Redactor(id)
	return c.Follow(ctx, func(stderr bool, text string) error { return emit(stderr, red.Redact(text)) })
}

// liveLocked is the sessions of sandbox id (nil for one that starts),
// those whose shell has ended forgotten (a stop ends them all). It makes
// no entry for a sandbox that has none.
func (t *toolbox) liveLocked(id string) map[string]*shell.Session {
	m := t.sessions[id]
	for sid, sess := range m {
		if sess == nil {
			continue
		}
		select {
		case <-sess.Ended():
			t.dropLocked(id, sid)
		default:
		}
	}
	return t.sessions[id]
}

// forget drops what the toolbox keeps of a deleted sandbox (its sessions
// ended with its workload).
func (t *toolbox) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sid := range t.sessions[id] {
		t.dropLocked(id, sid)
	}
}

// Confined reports whether sandbox id's workload is kept from the
// daemon's own files (its token, the records, the other sandboxes): its
// runtime isolates it (a container). A native sandbox's processes run as
// the daemon's user and can read all of them.
func (s *Supervisor) Confined(id string) (bool, error) {
	_, rt, err := s.runtimeOf(id)
	return err == nil && rt != nil && rt.Capabilities().Isolation, err
}

// runtimeOf is sandbox id and its runtime (nil when this daemon has it
// no more).
func (s *Supervisor) runtimeOf(id string) (*sandbox, runtime.Runtime, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	name := e.info.Runtime
	s.mu.Unlock()
	rt, _ := s.opts.Runtimes.Get(name)
	return e, rt, nil
}
