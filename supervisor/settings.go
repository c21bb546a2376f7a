package supervisor

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/redact"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Settings a sandbox keeps in any state, running or stopped: its labels and
// its after-stop intervals. Changing one is not activity (the idle clock
// is fed by keep-alives alone) and needs no workload.

// ReplaceLabels replaces every label of a sandbox, running or stopped.
func (s *Supervisor) ReplaceLabels(id string, labels map[string]string) (Sandbox, error) {
	if err := ValidateLabels(labels); err != nil {
		return Sandbox{}, err
	}
	return s.update(id, func(sb *Sandbox) error { sb.Labels = cloneMap(labels); return nil })
}

// SetAutoDelete sets how long after its stop a sandbox is deleted: nil
// never, 0 right after the stop (a sandbox stopped already goes at the
// next check).
func (s *Supervisor) SetAutoDelete(id string, after *time.Duration) (Sandbox, error) {
	if after != nil && *after < 0 {
		after = nil
	}
	return s.update(id, func(sb *Sandbox) error {
		if after == nil {
			sb.AutoDeleteInterval = nil
			return nil
		}
		d := *after
		sb.AutoDeleteInterval = &d
		return nil
	})
}

// SetPublic sets whether the sandbox's previews need no token.
func (s *Supervisor) SetPublic(id string, public bool) (Sandbox, error) {
	return s.update(id, func(sb *Sandbox) error { sb.Public = public; return nil })
}

// update changes a sandbox's settings in whatever state it is, under its
// operation lock, and persists them; an error from change leaves the
// sandbox as it was.
func (s *Supervisor) update(id string, change func(*Sandbox) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	next, gone := e.info, s.sandboxes[id] != e
	s.mu.Unlock()
	if gone {
		return Sandbox{}, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	}
	if err := change(&next); err != nil {
		return Sandbox{}, err
	}
	next.UpdatedAt = s.clock()
	s.commit(e, next, "")
	return next, nil
}

// EnvKeys returns the names of the variables a sandbox was created with,
// sorted: no value is read into an answer, none needs redacting.
func (s *Supervisor) EnvKeys(id string) ([]string, error) {
	env, err := s.envByID(id)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(env)), nil
}

// envByID is envOf the sandbox called id.
func (s *Supervisor) envByID(id string) (map[string]string, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	return s.envOf(e)
}

// Redactor removes the secrets a sandbox's output may hold, as its
// entrypoint logs are redacted: the secret values of its environment, the
// daemon's forwarded credentials, well-known token shapes. A sandbox that
// is gone gets the shapes and the daemon's credentials only. Making one
// reads the sandbox's environment: make one per answer, not per piece.
func (s *Supervisor) Redactor(id string) *redact.Redactor {
	secrets := s.secretsIn(nil)
	if e, err := s.lookup(id); err == nil {
		secrets = s.secretsOf(e)
	}
	return redact.New(secrets)
}

// PortEndpoint is where port of a running sandbox's workload (the port as
// the workload listens on it) is reached from this machine: a preview of
// any port. A runtime whose handles cannot say is ErrUnsupportedRuntime.
// A workload with a network of its own (runtime.PortDialer) has no
// endpoint here: the zero one says only that something listens; DialPort
// reaches it.
func (s *Supervisor) PortEndpoint(ctx context.Context, id string, port int) (runtime.Endpoint, error) {
	h, err := s.portHandle(id, port)
	if err != nil {
		return runtime.Endpoint{}, err
	}
	return h.(runtime.Ports).PortEndpoint(ctx, port)
}

// DialPort connects to port of a running sandbox's workload, as the
// workload listens on it: through its handle where its network is its
// own, else at its PortEndpoint.
func (s *Supervisor) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	h, err := s.portHandle(id, port)
	if err != nil {
		return nil, err
	}
	if d, ok := h.(runtime.PortDialer); ok {
		return d.DialPort(ctx, port)
	}
	ep, err := h.(runtime.Ports).PortEndpoint(ctx, port)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port)))
}

// portHandle is the handle of running sandbox id, whose ports can be
// reached (runtime.Ports).
func (s *Supervisor) portHandle(id string, port int) (runtime.Handle, error) {
	if port < 1 || port > 65535 {
		return nil, invalid("port %d is not a TCP port", port)
	}
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	st, h := e.info.State, e.handle
	s.mu.Unlock()
	if !st.Live() || h == nil {
		return nil, fmt.Errorf("%w: %s is %s", ErrNotRunning, Clip(id, MaxQuoted), st)
	}
	if _, ok := h.(runtime.Ports); !ok {
		return nil, fmt.Errorf("%w: the %s runtime cannot reach a port of its workloads", ErrUnsupportedRuntime, e.info.Runtime)
	}
	return h, nil
}
