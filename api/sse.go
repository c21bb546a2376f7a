package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// sseWriteTimeout bounds one write to an event stream: a client that stops
// reading is cut off instead of holding a goroutine forever.
const sseWriteTimeout = 10 * time.Second

// ParseLastEventID reads the resume point of an event stream from the
// Last-Event-ID header or the lastEventId query parameter. Anything that is
// not a plain decimal uint64 counts as absent, which yields a snapshot.
func ParseLastEventID(r *http.Request) *uint64 {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	v = strings.TrimSpace(v)
	if v == "" || strings.IndexFunc(v, func(c rune) bool { return c < '0' || c > '9' }) >= 0 {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	f, err := labelFilter(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	rc := http.NewResponseController(w)
	sub, first := s.sup.Subscribe(f, ParseLastEventID(r))
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// Tell EventSource how soon to come back after a drop.
	if !write([]byte("retry: 1000\n\n")) {
		return
	}
	for _, ev := range first {
		if !write(s.encoded.get(ev)) {
			return
		}
	}
	hb := time.NewTicker(s.opts.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-sub.C:
			if !ok {
				if sub.Dropped() {
					s.log.Debug("event stream dropped: the client fell behind", "remote", r.RemoteAddr)
				}
				return // the client reconnects with its last id and is replayed
			}
			if !write(s.encoded.get(ev)) {
				return
			}
		case <-hb.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		}
	}
}

func formatEvent(ev supervisor.Event) []byte {
	data, _ := json.Marshal(ToStreamEvent(ev))
	b := make([]byte, 0, len(data)+64)
	b = append(b, "id: "...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// encodedEvents shares one encoding of each event among all the streams
// that send it: with a hundred watchers, an event is marshalled once, not a
// hundred times. Snapshots differ per filter and are never shared.
type encodedEvents struct {
	mu    sync.Mutex
	bySeq map[uint64][]byte
	order []uint64 // oldest first, at most encodedEventsKept
}

const encodedEventsKept = 512

func (c *encodedEvents) get(ev supervisor.Event) []byte {
	if ev.Type == supervisor.EventSnapshot {
		return formatEvent(ev)
	}
	c.mu.Lock()
	b, ok := c.bySeq[ev.Seq]
	c.mu.Unlock()
	if ok {
		return b
	}
	b = formatEvent(ev)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySeq == nil {
		c.bySeq = map[uint64][]byte{}
	}
	if _, ok := c.bySeq[ev.Seq]; !ok {
		c.bySeq[ev.Seq] = b
		c.order = append(c.order, ev.Seq)
		if len(c.order) > encodedEventsKept {
			delete(c.bySeq, c.order[0])
			c.order = c.order[1:]
		}
	}
	return b
}
