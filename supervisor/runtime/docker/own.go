package docker

import (
	"context"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// What the runtime removes, it proves it made: a container whose name is
// the one it chose for a marker and that bears the root's seal of that
// marker. The owner and marker labels alone prove nothing: anyone can
// set them, and an image committed from a sandbox's container carries
// them into every container run from it.

// owns reports whether a container (by its name as the engine reports
// it, with or without the leading slash, and its labels) is the one this
// daemon made for its marker, given the seal it must bear.
func (r *Runtime) owns(name string, labels map[string]string, seal string) bool {
	m := labels[LabelMarker]
	return m != "" && seal != "" && labels[LabelOwner] == r.Owner &&
		strings.TrimPrefix(name, "/") == containerName(m) &&
		subtle.ConstantTimeCompare([]byte(labels[LabelSeal]), []byte(seal)) == 1
}

// Sweep removes this daemon's containers that carry one of markers and
// prove to be its own.
func (r *Runtime) Sweep(ctx context.Context, markers []string, own runtime.Owned) error {
	want := set(markers)
	_, err := r.removeProven(ctx, own, "sweep", func(m string) bool { return want[m] })
	return err
}

// Prune removes this daemon's containers whose marker is not in keep,
// where they prove to be its own; the others are logged and left. With
// no live sandbox to keep, it removes the daemon's network too, if no
// container is on it: one an earlier daemon of this root left (killed,
// or closed without having used docker since its start), which no
// later Close would remove either.
func (r *Runtime) Prune(ctx context.Context, keep []string, own runtime.Owned) error {
	live := set(keep)
	n, err := r.removeProven(ctx, own, "prune", func(m string) bool { return !live[m] })
	if n > 0 {
		r.Log.Info("removed containers no record names", "count", n)
	}
	if err == nil && len(keep) == 0 {
		r.removeNetwork(ctx)
	}
	return err
}

// removeProven removes the containers with this daemon's owner label whose
// marker pick chooses and that prove to be its own (name and seal); it
// logs and leaves the ones that only look like it, and returns how many
// it removed and what failed.
func (r *Runtime) removeProven(ctx context.Context, own runtime.Owned, what string, pick func(marker string) bool) (int, error) {
	list, err := r.Client.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+r.Owner))})
	if err != nil {
		return 0, r.engineErr("list containers to "+what, err)
	}
	removed := 0
	var errs []error
	for _, c := range list {
		m := c.Labels[LabelMarker]
		if !pick(m) {
			continue
		}
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		if !r.owns(name, c.Labels, own.Seal(m)) {
			r.Log.Warn("leaving alone a container with this daemon's labels but not its seal (run from a committed image?)", "container", c.ID[:12], "name", name)
			continue
		}
		if err := r.remove(ctx, c.ID, what+": remove container"); err != nil {
			errs = append(errs, err)
		} else {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

func set(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func (r *Runtime) remove(ctx context.Context, id, what string) error {
	err := r.Client.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !client.IsErrNotFound(err) {
		r.Log.Warn(what, "container", id[:min(12, len(id))], "err", err)
		return err
	}
	return nil
}

// lostFor bounds how long a container a failed create may have left is
// looked for in the background; one left after that bears the seal, so
// the next start's Prune removes it.
const lostFor = 2 * time.Minute

// removeLost removes the container a failed create may have left (the
// engine made it, but the answer was lost): found by the name chosen
// before asking, removed only if it bears the seal. An engine that does
// not answer is asked again in the background, until Close.
func (r *Runtime) removeLost(ctx context.Context, marker, seal string) {
	ctx = context.WithoutCancel(ctx)
	if r.removeNamed(ctx, marker, seal) == nil {
		return
	}
	life := r.lifetime()
	r.watched.Go(func() {
		deadline := time.Now().Add(lostFor)
		for attempt := 0; time.Now().Before(deadline); attempt++ {
			select {
			case <-life.Done():
				return
			case <-time.After(probe.Reconnect.Delay(attempt)):
			}
			if r.removeNamed(life, marker, seal) == nil {
				return
			}
		}
		r.Log.Warn("a failed create may have left a container the engine did not let the daemon remove; the next start removes it", "name", containerName(marker))
	})
}

// removeNamed removes the container named for marker if it is ours; nil
// when there is none (any more).
func (r *Runtime) removeNamed(ctx context.Context, marker, seal string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := r.Client.ContainerInspect(ctx, containerName(marker))
	switch {
	case client.IsErrNotFound(err):
		return nil
	case err != nil:
		return err
	case info.Config == nil || !r.owns(info.Name, info.Config.Labels, seal):
		r.Log.Warn("leaving alone a container with a sandbox's name but not this daemon's seal", "name", info.Name)
		return nil
	}
	return r.remove(ctx, info.ID, "remove the container of a failed create")
}
