package supervisor

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Bounds of terminals: per sandbox and in all, those whose command has
// ended included (the oldest ended one makes room for a new one). A
// running terminal's command is also one of the sandbox's execs.
const (
	MaxTerminalsPerSandbox = 8
	MaxTerminals           = 32
)

// DefaultTerm is TERM in a terminal whose request sets none.
const DefaultTerm = "xterm-256color"

// OpenTerminal opens terminal spec in running sandbox id, running argv
// (nil: ShellArgv) with spec's variables; it counts as activity. An id
// in use is ErrConflict; past the bounds, ErrBusy.
func (s *Supervisor) OpenTerminal(id string, spec terminal.Spec, argv []string) (*terminal.Terminal, error) {
	if !validName(spec.ID) {
		return nil, invalid("terminal id %q must match %s", Clip(spec.ID, MaxQuoted), nameRE)
	}
	if argv == nil {
		argv = ShellArgv
	}
	if err := (&RunSpec{Argv: argv, Env: spec.Env}).check(); err != nil {
		return nil, err
	}
	h, err := s.terminalHandle(id)
	if err != nil {
		return nil, err
	}
	if _, ok := spec.Env["TERM"]; !ok {
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env["TERM"] = DefaultTerm
	}
	env := childenv.List(spec.Env)
	start := func(stdin io.Reader, stdout io.Writer, cols, rows int) (runtime.Terminal, error) {
		p, err := s.Exec(context.Background(), id, runtime.ExecSpec{Argv: argv, Env: env, Dir: spec.Dir, Stdin: stdin, Stdout: stdout, TTY: true, Cols: cols, Rows: rows})
		if err != nil {
			return nil, err
		}
		return p.(runtime.Terminal), nil
	}
	red := s.Redactor(id)
	filter := func(b []byte) []byte { return []byte(red.Redact(string(b))) }
	// The place is taken under the lock, the command started outside it:
	// a start (a docker exec) holds up no other terminal.
	lazy := spec.Lazy
	spec.Lazy = true
	t, _ := terminal.New(spec, start, filter)
	s.terms.mu.Lock()
	err = s.roomForTerminalLocked(id, spec.ID, h)
	if err == nil {
		s.terms.addLocked(id, t, h)
	}
	s.terms.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !lazy {
		if err := t.Start(); err != nil {
			s.terms.mu.Lock()
			s.terms.removeLocked(id, t)
			s.terms.mu.Unlock()
			return nil, err
		}
	}
	_ = s.RefreshActivity(id)
	return t, nil
}

// terminalHandle is running sandbox id's handle, whose runtime gives
// commands a terminal (ErrUnsupportedRuntime otherwise).
func (s *Supervisor) terminalHandle(id string) (runtime.Handle, error) {
	e, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	name := e.info.Runtime
	s.mu.Unlock()
	if rt, _ := s.opts.Runtimes.Get(name); rt == nil || !rt.Capabilities().Terminal {
		return nil, fmt.Errorf("%w: the %s runtime gives its commands no terminal", ErrUnsupportedRuntime, name)
	}
	return h, nil
}

// roomForTerminalLocked makes room for terminal tid in sandbox id, whose
// workload is h: refuses a name in use, and past the bounds forgets the
// oldest ended terminal or refuses.
func (s *Supervisor) roomForTerminalLocked(id, tid string, h runtime.Handle) error {
	list := s.terms.liveLocked(id, h)
	for _, t := range list {
		if t.Info().ID == tid {
			return fmt.Errorf("%w: terminal %s exists in %s", ErrConflict, tid, Clip(id, MaxQuoted))
		}
	}
	if len(list) < MaxTerminalsPerSandbox && s.terms.count < MaxTerminals {
		return nil
	}
	for _, t := range list {
		if !t.Info().Active {
			s.terms.removeLocked(id, t)
			return nil
		}
	}
	if len(list) >= MaxTerminalsPerSandbox {
		return fmt.Errorf("%w: %s has %d terminals running (at most %d); close one first", ErrBusy, Clip(id, MaxQuoted), len(list), MaxTerminalsPerSandbox)
	}
	return fmt.Errorf("%w: %d terminals are open (at most %d in all); close one first", ErrBusy, s.terms.count, MaxTerminals)
}

// Terminals lists running sandbox id's terminals, in the order opened.
func (s *Supervisor) Terminals(id string) ([]*terminal.Terminal, error) {
	h, err := s.terminalHandle(id)
	if err != nil {
		return nil, err
	}
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	return append([]*terminal.Terminal{}, s.terms.liveLocked(id, h)...), nil
}

// Terminal finds terminal tid of running sandbox id (ErrNotFound).
func (s *Supervisor) Terminal(id, tid string) (*terminal.Terminal, error) {
	list, err := s.Terminals(id)
	if err != nil {
		return nil, err
	}
	for _, t := range list {
		if t.Info().ID == tid {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: no terminal %s in %s", ErrNotFound, Clip(tid, MaxQuoted), Clip(id, MaxQuoted))
}

// TerminalInput types p into terminal tid; it counts as activity.
func (s *Supervisor) TerminalInput(id, tid string, p []byte) error {
	t, err := s.Terminal(id, tid)
	if err != nil {
		return err
	}
	if _, err := t.Write(p); err != nil {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	_ = s.RefreshActivity(id)
	return nil
}

// ResizeTerminal sets terminal tid's size; it counts as activity.
func (s *Supervisor) ResizeTerminal(id, tid string, cols, rows int) (terminal.Info, error) {
	t, err := s.Terminal(id, tid)
	if err != nil {
		return terminal.Info{}, err
	}
	if err := t.Resize(cols, rows); err != nil {
		return terminal.Info{}, invalid("%v", err)
	}
	_ = s.RefreshActivity(id)
	return t.Info(), nil
}

// CloseTerminal ends terminal tid's command and forgets it; it counts as
// activity.
func (s *Supervisor) CloseTerminal(id, tid string) error {
	t, err := s.Terminal(id, tid)
	if err != nil {
		return err
	}
	t.Close()
	s.terms.mu.Lock()
	s.terms.removeLocked(id, t)
	s.terms.mu.Unlock()
	_ = s.RefreshActivity(id)
	return nil
}
