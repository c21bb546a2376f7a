package native

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Resize applies new limits to the running sandbox's cgroup.
func (h *handle) Resize(ctx context.Context, r runtime.Resources) error {
	err := errors.New("the sandbox has no cgroup")
	if h.g != nil {
		err = h.g.Set(cgroup.Limits(r))
	}
	if h.g == nil || errors.Is(err, cgroup.ErrUnsupported) {
		return fmt.Errorf("%w: %v", runtime.ErrLimitsUnsupported, err)
	}
	return err
}

// Limits reads the limits in force in the sandbox's cgroup; a sandbox
// without one has none.
func (h *handle) Limits(context.Context) (runtime.Resources, error) {
	if h.g == nil {
		return runtime.Resources{}, nil
	}
	l, err := h.g.Limits()
	return runtime.Resources(l), err
}

// Usage reads the sandbox's cgroup (files: ctx is not needed).
func (h *handle) Usage(context.Context) (runtime.Usage, error) {
	if h.g == nil {
		return runtime.Usage{}, fmt.Errorf("%w: the sandbox has no cgroup", runtime.ErrNotMetered)
	}
	u, err := h.g.Usage()
	return runtime.Usage(u), err
}

// CgroupPath returns the cgroup2 path a native handle's state names, or ""
// when the sandbox has no cgroup, for tools that read records.
func CgroupPath(st runtime.HandleState) (string, error) {
	s, err := decode(st)
	if err != nil || s.Cgroup == nil {
		return "", err
	}
	return s.Cgroup.Path, nil
}
