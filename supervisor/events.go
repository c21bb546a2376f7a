package supervisor

import (
	"sync"
	"time"
)

// Event types on the feed.
const (
	EventReplaced = "sandboxes_replaced"
	EventCreated  = "sandbox.created"
	EventStarting = "sandbox.starting" // a stopped sandbox started again
	EventStarted  = "sandbox.started"
	EventStopped  = "sandbox.stopped"
	EventDeleted  = "sandbox.deleted"
)

// Event is one change on the feed. Seq grows by one per event and keeps
// growing across daemon restarts (it starts from the wall clock in
// microseconds), so an id from an earlier daemon is never mistaken for a
// recent one.
type Event struct {
	Seq     uint64
	Type    string
	Time    time.Time
	Sandbox Sandbox   // for sandbox.* events
	All     []Sandbox // for sandboxes_replaced
}

// Filter selects sandboxes by exact label matches, all of which must hold.
type Filter map[string]string

// Match reports whether labels satisfy f.
func (f Filter) Match(labels map[string]string) bool {
	for k, v := range f {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Subscription delivers events to one watcher. C is closed when the
// subscription ends: by Close, by the supervisor closing, or because the
// watcher fell behind by more than its buffer (Dropped then reports true; it
// should reconnect with its last id and be replayed).
type Subscription struct {
	C <-chan Event

	c       chan Event
	filter  Filter
	hub     *hub
	dropped bool // guarded by hub.mu
	closed  bool // guarded by hub.mu
}

// Dropped reports whether the subscription was ended for falling behind.
func (s *Subscription) Dropped() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.dropped
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.remove(s)
}

// hub is the ring buffer of recent events and the set of subscribers.
// Publishing never blocks: a subscriber whose buffer is full is dropped.
type hub struct {
	mu     sync.Mutex
	seq    uint64
	ring   []Event // ring[(i)%len] ; holds the last len(ring) events
	n      int     // events stored, ≤ len(ring)
	subs   map[*Subscription]struct{}
	subBuf int
	onPub  func(string)
}

func newHub(size, subBuf int, start uint64) *hub {
	return &hub{seq: start, ring: make([]Event, size), subs: map[*Subscription]struct{}{}, subBuf: subBuf}
}

// publish stamps ev with the next seq, stores it and fans it out. Callers
// hold the supervisor's lock so that the feed's order is the state's order.
func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	ev.Seq = h.seq
	h.ring[int(ev.Seq%uint64(len(h.ring)))] = ev
	if h.n < len(h.ring) {
		h.n++
	}
	for s := range h.subs {
		if !s.filter.Match(ev.Sandbox.Labels) {
			continue
		}
		select {
		case s.c <- ev:
		default:
			s.dropped = true
			h.remove(s)
		}
	}
	if h.onPub != nil {
		h.onPub(ev.Type)
	}
}

func (h *hub) remove(s *Subscription) {
	if s.closed {
		return
	}
	s.closed = true
	delete(h.subs, s)
	close(s.c)
}

// subscribe registers a watcher. If after is non-nil and every event after
// it is still in the ring, those events are returned for replay; otherwise
// replay is nil and the caller must send a snapshot taken under the same
// supervisor lock, stamped with the returned seq.
func (h *hub) subscribe(f Filter, after *uint64) (sub *Subscription, replay []Event, replayOK bool, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan Event, h.subBuf)
	sub = &Subscription{C: c, c: c, filter: f, hub: h}
	h.subs[sub] = struct{}{}
	if after != nil && *after <= h.seq && h.seq-*after <= uint64(h.n) {
		for s := *after + 1; s <= h.seq; s++ {
			ev := h.ring[int(s%uint64(len(h.ring)))]
			if f.Match(ev.Sandbox.Labels) {
				replay = append(replay, ev)
			}
		}
		return sub, replay, true, h.seq
	}
	return sub, nil, false, h.seq
}

func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		h.remove(s)
	}
}

// Subscribe opens a watch on the event feed for sandboxes matching f. If
// after is given and every later event is still buffered, those events are
// returned for replay; otherwise the first event is a sandboxes_replaced
// snapshot. Either way no event is missed or repeated between the two.
func (s *Supervisor) Subscribe(f Filter, after *uint64) (*Subscription, []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, replay, ok, seq := s.events.subscribe(f, after)
	if ok {
		return sub, replay
	}
	return sub, []Event{{Seq: seq, Type: EventReplaced, Time: s.clock(), All: s.listLocked(f)}}
}
