package runtime

import (
	"context"
	"time"
)

// The steps of a Start a runtime may time (Mark): what the daemon's
// per-step breakdown of a create shows between the supervisor's own
// steps. A runtime that marks none is timed as one step.
const (
	StepCgroup = "cgroup" // the sandbox's cgroups made and limited
	StepSpawn  = "spawn"  // fork and exec, and the child's identity read back
	StepWatch  = "watch"  // the exit watch set up (a group is watched for emptiness only if it outlives its leader)
)

// A Trace times the steps of one operation: each Mark ends the step it
// names, begun at the previous mark (or at NewTrace), and adds its time.
// Its methods are for one goroutine; a nil Trace marks nothing.
type Trace struct {
	last time.Time
	took map[string]time.Duration
}

// NewTrace starts a trace now.
func NewTrace() *Trace { return &Trace{last: time.Now(), took: map[string]time.Duration{}} }

// Mark ends the step called step now.
func (t *Trace) Mark(step string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.took[step] += now.Sub(t.last)
	t.last = now
}

// Took is the time marked for each step.
func (t *Trace) Took() map[string]time.Duration {
	if t == nil {
		return nil
	}
	return t.took
}

type traceKey struct{}

// WithTrace returns ctx carrying t, for Mark.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// Mark ends step on the trace ctx carries, if any.
func Mark(ctx context.Context, step string) {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	t.Mark(step)
}
