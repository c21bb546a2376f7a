package supervisor

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Create results, for metrics.
const (
	CreateOK                 = "ok"
	CreateInvalid            = "invalid"
	CreateConflict           = "conflict"
	CreateUnsupportedRuntime = "unsupported_runtime"
	CreatePreflightFailed    = "preflight_failed"
	CreateFailed             = "failed"
)

// CreateResults lists every create result.
var CreateResults = []string{CreateOK, CreateInvalid, CreateConflict, CreateUnsupportedRuntime, CreatePreflightFailed, CreateFailed}

// CreateResult classifies a Create error into the closed set.
func CreateResult(err error) string {
	switch {
	case err == nil:
		return CreateOK
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrLimitsUnsupported), errors.Is(err, ErrImageNotFound), errors.Is(err, ErrProgramNotFound):
		return CreateInvalid
	case errors.Is(err, ErrConflict):
		return CreateConflict
	case errors.Is(err, ErrUnsupportedRuntime):
		return CreateUnsupportedRuntime
	case errors.Is(err, ErrPortsExhausted), errors.Is(err, ErrRuntimeUnavailable):
		return CreatePreflightFailed
	default:
		return CreateFailed
	}
}

// The supervisor's steps of a create, around the runtime's own
// (runtime.Step*), for the per-step breakdown in metrics.
const (
	StepCheck     = "check"     // the request checked, its snapshot and limits resolved, its name reserved
	StepLease     = "lease"     // its port leased
	StepDirectory = "directory" // its directory made, with the env file and the intent record
	StepStart     = "start"     // what the runtime's Start did past the steps it marks (all of it for one that marks none)
	StepRecord    = "record"    // the record naming the workload written and fsynced
	StepPublish   = "publish"   // the created event published, the watch goroutine begun
)

// CreateSteps lists every step of a create, in order.
var CreateSteps = []string{StepCheck, StepLease, StepDirectory, runtime.StepCgroup, runtime.StepSpawn, runtime.StepWatch, StepStart, StepRecord, StepPublish}

// ReadyBuckets are the upper bounds, in seconds, of the time-to-ready
// histogram: from a workload's start to its ready path answering.
var ReadyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Histogram is a point-in-time copy of a histogram: counts by bucket
// (ReadyBuckets; not cumulative, the last one past the highest bound), the
// sum and the count of observations.
type Histogram struct {
	Buckets []uint64
	Sum     float64
	Count   uint64
}

func (h *Histogram) observe(v float64) {
	if h.Buckets == nil {
		h.Buckets = make([]uint64, len(ReadyBuckets)+1)
	}
	i := 0
	for i < len(ReadyBuckets) && v > ReadyBuckets[i] {
		i++
	}
	h.Buckets[i]++
	h.Sum += v
	h.Count++
}

type stats struct {
	mu         sync.Mutex
	ready      map[string]*Histogram // by runtime
	creates    map[string]uint64
	stops      map[StopReason]uint64
	rehydrates map[string]uint64
	events     map[string]uint64
	steps      map[string]float64 // CreateSteps → seconds, over the creates that succeeded
}

func newStats() *stats {
	return &stats{ready: map[string]*Histogram{}, creates: map[string]uint64{}, stops: map[StopReason]uint64{}, rehydrates: map[string]uint64{}, events: map[string]uint64{}, steps: map[string]float64{}}
}

// created counts a create and, when it succeeded, the time of its steps.
func (st *stats) created(err error, tr *runtime.Trace) {
	st.mu.Lock()
	st.creates[CreateResult(err)]++
	if err == nil {
		for step, d := range tr.Took() {
			st.steps[step] += d.Seconds()
		}
	}
	st.mu.Unlock()
}

func (st *stats) readied(runtime string, d time.Duration) {
	st.mu.Lock()
	h := st.ready[runtime]
	if h == nil {
		h = &Histogram{}
		st.ready[runtime] = h
	}
	h.observe(d.Seconds())
	st.mu.Unlock()
}

func (st *stats) stopped(r StopReason) {
	st.mu.Lock()
	st.stops[r]++
	st.mu.Unlock()
}

func (st *stats) rehydrated(r string) {
	st.mu.Lock()
	st.rehydrates[r]++
	st.mu.Unlock()
}

func (st *stats) eventPublished(t string) {
	st.mu.Lock()
	st.events[t]++
	st.mu.Unlock()
}

// Stats is a point-in-time copy of the supervisor's counters and gauges.
// Every key comes from a closed set.
type Stats struct {
	Sandboxes  map[string]map[State]int // runtime → state → count
	Creates    map[string]uint64        // CreateResults
	Stops      map[StopReason]uint64
	Rehydrates map[string]uint64 // RehydrateResults
	Events     map[string]uint64 // event type → published
	// CreateSteps is the time spent in each step (CreateSteps) of the
	// creates that succeeded, in seconds.
	CreateSteps map[string]float64
	// Ready is, by runtime, how long started workloads took to answer
	// their ready path (since this daemon started).
	Ready       map[string]Histogram
	PortsInUse  int
	PortsTotal  int
	Subscribers int
}

// Stats returns the current counters and gauges. It asks no runtime
// anything (usage is UsageByRuntime's), so the watchdog and a status
// line never wait on one.
func (s *Supervisor) Stats() Stats {
	out := Stats{Sandboxes: map[string]map[State]int{}}
	for _, name := range s.opts.Runtimes.Names() {
		out.Sandboxes[name] = map[State]int{Starting: 0, Started: 0, Stopped: 0}
	}
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if e.pending {
			continue
		}
		sb := e.info
		if out.Sandboxes[sb.Runtime] == nil {
			out.Sandboxes[sb.Runtime] = map[State]int{}
		}
		out.Sandboxes[sb.Runtime][sb.State]++
	}
	s.mu.Unlock()
	st := s.stats
	st.mu.Lock()
	out.Creates = maps.Clone(st.creates)
	out.Stops = maps.Clone(st.stops)
	out.Rehydrates = maps.Clone(st.rehydrates)
	out.Events = maps.Clone(st.events)
	out.CreateSteps = maps.Clone(st.steps)
	out.Ready = map[string]Histogram{}
	for rt, h := range st.ready {
		out.Ready[rt] = Histogram{Buckets: slices.Clone(h.Buckets), Sum: h.Sum, Count: h.Count}
	}
	st.mu.Unlock()
	out.PortsInUse = s.ports.inUse()
	out.PortsTotal = s.opts.PortHi - s.opts.PortLo + 1
	out.Subscribers = s.events.subscribers()
	return out
}

// UsageByRuntime sums what the live sandboxes of each runtime consume,
// over those whose runtime says so within ctx and UsageTimeout.
func (s *Supervisor) UsageByRuntime(ctx context.Context) map[string]runtime.Usage {
	var (
		names  []string
		meters []runtime.Meter
	)
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if m, ok := e.handle.(runtime.Meter); ok && !e.pending && e.info.State.Live() {
			names, meters = append(names, e.info.Runtime), append(meters, m)
		}
	}
	s.mu.Unlock()
	out := map[string]runtime.Usage{}
	for i, u := range meterAll(ctx, meters) {
		if u == nil {
			continue
		}
		sum := out[names[i]]
		sum.CPUSeconds += u.CPUSeconds
		sum.MemoryBytes += u.MemoryBytes
		sum.Pids += u.Pids
		out[names[i]] = sum
	}
	return out
}
