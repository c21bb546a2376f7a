package supervisor

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/interp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of interpreter contexts (each a python3 worker once it has run
// code): per sandbox and in all, the default one included.
const (
	MaxContextsPerSandbox = 8
	MaxContexts           = 32
)

// DefaultContext is the context a run names no context for.
const DefaultContext = "default"

// CreateContext makes an interpreter context in running sandbox id whose
// code runs in cwd (empty: the workspace); it counts as activity. Its
// worker starts at its first run.
func (s *Supervisor) CreateContext(id, cwd string) (*interp.Context, error) {
	c, err := s.context(id, "", cwd, true)
	if err == nil {
		_ = s.RefreshActivity(id)
	}
	return c, err
}

// context finds context cid of sandbox id or, with create, makes it (a
// new id when cid is empty).
func (s *Supervisor) context(id, cid, cwd string, create bool) (*interp.Context, error) {
	_, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	s.ctxs.mu.Lock()
	defer s.ctxs.mu.Unlock()
	list := s.ctxs.liveLocked(id, h)
	for _, c := range list {
		if c.ID == cid {
			return c, nil
		}
	}
	if !create {
		return nil, fmt.Errorf("%w: no interpreter context %s in %s", ErrNotFound, Clip(cid, MaxQuoted), Clip(id, MaxQuoted))
	}
	switch {
	case len(list) >= MaxContextsPerSandbox:
		return nil, fmt.Errorf("%w: %s has %d interpreter contexts (at most %d); delete one first", ErrBusy, Clip(id, MaxQuoted), len(list), MaxContextsPerSandbox)
	case s.ctxs.count >= MaxContexts:
		return nil, fmt.Errorf("%w: %d interpreter contexts exist (at most %d in all); delete one first", ErrBusy, s.ctxs.count, MaxContexts)
	}
	if cid == "" {
		cid = rand.Text()[:16]
	}
	c := interp.New(cid, cwd, func(stdin io.Reader, stdout io.Writer) (runtime.Process, error) {
		return s.Exec(context.Background(), id, runtime.ExecSpec{Argv: interp.Argv, Dir: cwd, Stdin: stdin, Stdout: stdout})
	})
	s.ctxs.addLocked(id, c, h)
	return c, nil
}

// Contexts lists running sandbox id's contexts but the default one.
func (s *Supervisor) Contexts(id string) ([]*interp.Context, error) {
	_, h, err := s.liveHandle(id)
	if err != nil {
		return nil, err
	}
	s.ctxs.mu.Lock()
	defer s.ctxs.mu.Unlock()
	out := []*interp.Context{}
	for _, c := range s.ctxs.liveLocked(id, h) {
		if c.ID != DefaultContext {
			out = append(out, c)
		}
	}
	return out, nil
}

// DeleteContext ends context cid and its worker; it counts as activity.
func (s *Supervisor) DeleteContext(id, cid string) error {
	c, err := s.context(id, cid, "", false)
	if err != nil {
		return err
	}
	c.Close()
	s.ctxs.mu.Lock()
	s.ctxs.removeLocked(id, c)
	s.ctxs.mu.Unlock()
	_ = s.RefreshActivity(id)
	return nil
}

// RunCode runs code in context cid of sandbox id (empty: the default
// context, made when first used), streaming its output to emit (redacted
// as the sandbox's logs are); it counts as activity.
func (s *Supervisor) RunCode(ctx context.Context, id, cid, code string, envs map[string]string, timeout time.Duration, emit func(interp.Message) error) error {
	if cid == "" {
		cid = DefaultContext
	}
	c, err := s.context(id, cid, "", cid == DefaultContext)
	if err != nil {
		return err
	}
	_ = s.RefreshActivity(id)
	red := s.Redactor(id)
	return c.Run(ctx, code, envs, timeout, func(m interp.Message) error {
		m.Text, m.Value, m.Traceback = red.Redact(m.Text), red.Redact(m.Value), red.Redact(m.Traceback)
		return emit(m)
	})
}
