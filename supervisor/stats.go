package supervisor

import (
	"errors"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"maps"
	"sync"
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
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrLimitsUnsupported), errors.Is(err, ErrImageNotFound):
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

type stats struct {
	mu         sync.Mutex
	creates    map[string]uint64
	stops      map[StopReason]uint64
	rehydrates map[string]uint64
	events     map[string]uint64
}

func newStats() *stats {
	return &stats{creates: map[string]uint64{}, stops: map[StopReason]uint64{}, rehydrates: map[string]uint64{}, events: map[string]uint64{}}
}

func (st *stats) created(err error) {
	st.mu.Lock()
	st.creates[CreateResult(err)]++
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
	Sandboxes   map[string]map[State]int // runtime → state → count
	Creates     map[string]uint64        // CreateResults
	Stops       map[StopReason]uint64
	Rehydrates  map[string]uint64 // RehydrateResults
	Events      map[string]uint64 // event type → published
	PortsInUse  int
	PortsTotal  int
	Subscribers int
	// Usage sums what the live sandboxes of each runtime consume, over
	// those whose runtime can say.
	Usage map[string]runtime.Usage
}

// Stats returns the current counters and gauges.
func (s *Supervisor) Stats() Stats {
	out := Stats{Sandboxes: map[string]map[State]int{}}
	for _, name := range s.opts.Runtimes.Names() {
		out.Sandboxes[name] = map[State]int{Starting: 0, Started: 0, Stopped: 0}
	}
	type metered struct {
		runtime string
		m       runtime.Meter
	}
	var meters []metered
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
		if m, ok := e.handle.(runtime.Meter); ok && sb.State.Live() {
			meters = append(meters, metered{sb.Runtime, m})
		}
	}
	s.mu.Unlock()
	// Read outside mu: usage comes from files or an engine, so a few
	// readers at once (a scrape must not take one engine call per
	// sandbox in a row).
	out.Usage = map[string]runtime.Usage{}
	var (
		sumMu sync.Mutex
		wg    sync.WaitGroup
		slots = make(chan struct{}, 8)
	)
	for _, m := range meters {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			u, err := m.m.Usage()
			if err != nil {
				return
			}
			sumMu.Lock()
			sum := out.Usage[m.runtime]
			sum.CPUSeconds += u.CPUSeconds
			sum.MemoryBytes += u.MemoryBytes
			sum.Pids += u.Pids
			out.Usage[m.runtime] = sum
			sumMu.Unlock()
		})
	}
	wg.Wait()
	st := s.stats
	st.mu.Lock()
	out.Creates = maps.Clone(st.creates)
	out.Stops = maps.Clone(st.stops)
	out.Rehydrates = maps.Clone(st.rehydrates)
	out.Events = maps.Clone(st.events)
	st.mu.Unlock()
	out.PortsInUse = s.ports.inUse()
	out.PortsTotal = s.opts.PortHi - s.opts.PortLo + 1
	out.Subscribers = s.events.subscribers()
	return out
}
