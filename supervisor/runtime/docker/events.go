package docker

import (
	"context"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// track registers a container whose end the event stream reports.
func (r *Runtime) track(s state) *handle {
	h := &handle{r: r, st: s, Ending: runtime.NewEnding(),
		Files: workspace.Files{Host: s.Workspace, Seen: WorkspaceDir}}
	id := s.ID
	r.mu.Lock()
	if r.handles == nil {
		r.handles = map[string]*handle{}
	}
	r.handles[id] = h
	r.mu.Unlock()
	return h
}

func (r *Runtime) untrack(id string) {
	r.mu.Lock()
	delete(r.handles, id)
	r.mu.Unlock()
}

// startWatch subscribes to the engine's container events once.
func (r *Runtime) startWatch() {
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		r.mu.Lock()
		r.life, r.cancel = ctx, cancel
		r.mu.Unlock()
		r.watched.Go(func() { r.watch(ctx) })
	})
}

// lifetime is a context that ends at Close.
func (r *Runtime) lifetime() context.Context {
	r.startWatch()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.life
}

// watch follows the engine's die events for this daemon's containers. A
// stream that drops is subscribed again from the time of the last event
// seen, so nothing is lost; each (re)subscription also inspects every
// tracked container, for what happened while there was none.
func (r *Runtime) watch(ctx context.Context) {
	since := time.Now()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		sub, cancel := context.WithCancel(ctx)
		msgs, errs := r.Client.Events(sub, events.ListOptions{
			Since: engineTime(since),
			Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)),
				filters.Arg("label", LabelOwner+"="+r.Owner),
				filters.Arg("event", string(events.ActionDie)), filters.Arg("event", string(events.ActionDestroy))),
		})
		r.reconcile(ctx)
	stream:
		for {
			select {
			case m := <-msgs:
				attempt = 0
				if m.TimeNano > 0 {
					since = time.Unix(0, m.TimeNano)
				}
				r.died(ctx, m.Actor.ID)
			case err := <-errs:
				if ctx.Err() == nil {
					r.Log.Warn("docker event stream dropped; subscribing again", "err", err)
				}
				break stream
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(probe.Reconnect.Delay(attempt)):
		}
	}
}

// died finishes the handle of a container that has stopped running.
func (r *Runtime) died(ctx context.Context, id string) {
	r.mu.Lock()
	h := r.handles[id]
	r.mu.Unlock()
	if h == nil {
		return
	}
	info, err := r.Client.ContainerInspect(ctx, id)
	switch {
	case client.IsErrNotFound(err):
		h.finish(runtime.Exit{Unknown: true})
	case err != nil:
		return // the next reconcile looks again
	case info.State == nil || !info.State.Running:
		h.finish(exitOf(info))
	}
}

// reconcile inspects every tracked container.
func (r *Runtime) reconcile(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.handles))
	for id := range r.handles {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.died(ctx, id)
	}
}
