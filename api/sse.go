package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
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
		if !write(formatEvent(ev)) {
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
				return // dropped for falling behind, or shutting down
			}
			if !write(formatEvent(ev)) {
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
