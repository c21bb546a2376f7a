package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
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
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	sub, first := s.sup.Subscribe(f, ParseLastEventID(r))
	defer sub.Close()

	st := startStream(w)
	// Tell EventSource how soon to come back after a drop.
	if !st.send([]byte("retry: 1000\n\n")) {
		return
	}
	for _, ev := range first {
		if ev.Type == supervisor.EventReplaced {
			// Written as it is encoded, in pieces: a snapshot of a big
			// registry is never held whole in memory.
			if writeSnapshot(st, ev) != nil || st.rc.Flush() != nil {
				return
			}
			continue
		}
		if !st.send(s.encoded.get(ev)) {
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
			if !st.send(s.encoded.get(ev)) {
				return
			}
		case <-hb.C:
			if !st.send(keepAlive) {
				return
			}
		}
	}
}

// stream is one Server-Sent Events answer. Every write renews the write
// deadline, so that only a client that stops reading is cut off.
type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	mu sync.Mutex // send's: a heartbeat and an event take turns
}

// keepAlive is the comment an idle stream gets every heartbeat.
var keepAlive = []byte(": keep-alive\n\n")

// startStream answers 200 with the headers of an event stream.
func startStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &stream{w: w, rc: http.NewResponseController(w)}
}

// Write writes a piece of an event, unflushed.
func (st *stream) Write(b []byte) (int, error) {
	_ = st.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	return st.w.Write(b)
}

// send writes b and flushes it; false when the client is gone.
func (st *stream) send(b []byte) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, err := st.Write(b); err != nil {
		return false
	}
	return st.rc.Flush() == nil
}

// heartbeat sends keepAlive every interval until ctx ends; a client
// gone cancels.
func (st *stream) heartbeat(ctx context.Context, every time.Duration, cancel func()) {
	hb := time.NewTicker(every)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if !st.send(keepAlive) {
				cancel()
				return
			}
		}
	}
}

// sendJSON sends one event of type event whose data is v; false when
// the client is gone.
func (st *stream) sendJSON(event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return st.send(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, b))
}

// followLogs streams a sandbox's entrypoint logs as Server-Sent Events:
// "stdout" and "stderr" events whose data is {"text": …} (whole lines,
// redacted, at most supervisor.FollowChunk bytes each), then one "end"
// event with the sandbox when it is no longer running. A sandbox that is
// not found answers 404 before the stream starts.
func (s *Server) followLogs(w http.ResponseWriter, r *http.Request, q supervisor.LogQuery) {
	id := r.PathValue("id")
	if _, err := s.sup.Get(id); err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	st := startStream(w)
	errGone := errors.New("the client is gone")
	send := func(event string, v any) error {
		if !st.sendJSON(event, v) {
			return errGone
		}
		return nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go st.heartbeat(ctx, s.opts.Heartbeat, cancel)
	sb, err := s.sup.FollowLogs(ctx, id, q, func(c supervisor.LogChunk) error {
		return send(c.Stream, wire.LogChunk{Text: c.Text, Time: c.At.UTC().Format(wire.LogTimeFormat)})
	})
	if err != nil {
		return // the client left, or the stream broke: nothing more to say
	}
	cancel() // no more heartbeats; send takes turns with one under way
	_ = send(wire.LogEventEnd, ToInfo(sb))
}

// MaxSSELine bounds every line of an event stream. Common SSE clients read
// lines into a 64 KiB buffer and fail on longer ones; the data of an event
// is spread over several data: lines, broken only between JSON tokens
// (clients join data lines with newlines, which JSON allows between
// tokens). A line is broken at the first token boundary past
// sseLineTarget; the longest token is a label value or key (at most 512 and
// 128 bytes, 6 times that when every byte is escaped), so no line comes
// near the bound.
const (
	MaxSSELine    = 16 << 10
	sseLineTarget = 8 << 10
)

// sseWriter is where an event is written: a bufio.Writer on a stream, or
// the bytes.Buffer of an event encoded once for all streams.
type sseWriter interface {
	io.Writer
	io.ByteWriter
	io.StringWriter
}

// dataLines writes JSON as SSE data lines.
type dataLines struct {
	w        sseWriter
	line     int // bytes on the current line
	str, esc bool
	started  bool
}

func newDataLines(w sseWriter) *dataLines { return &dataLines{w: w} }

// Write writes a piece of the JSON text; pieces may end anywhere. A
// newline byte can only be the one json.Encoder puts after a value (JSON
// strings escape theirs): it is dropped.
func (d *dataLines) Write(b []byte) (int, error) {
	if !d.started {
		d.w.WriteString("data: ")
		d.started = true
	}
	for _, c := range b {
		switch {
		case c == '\n':
			continue
		case d.esc:
			d.esc = false
		case d.str:
			if c == '\\' {
				d.esc = true
			} else if c == '"' {
				d.str = false
			}
		case c == '"':
			d.str = true
		case (c == ',' || c == ':' || c == '{' || c == '[') && d.line >= sseLineTarget:
			d.w.WriteByte(c)
			d.w.WriteString("\ndata: ")
			d.line = 0
			continue
		}
		d.w.WriteByte(c)
		d.line++
	}
	return len(b), nil
}

// end closes the event.
func (d *dataLines) end() { d.w.WriteString("\n\n") }

func eventHead(w sseWriter, seq uint64, typ string) {
	w.WriteString("id: ")
	w.WriteString(strconv.FormatUint(seq, 10))
	w.WriteString("\nevent: ")
	w.WriteString(typ)
	w.WriteByte('\n')
}

// formatEvent encodes ev as an SSE event. It is encoded in a buffer kept
// for the next event and copied out at its size (a sandbox's event takes
// under a KiB; a bufio.Writer's 4 KiB in between were most of what an
// event cost to encode).
func formatEvent(ev supervisor.Event) []byte {
	buf := eventBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 64<<10 { // a snapshot of a big registry is not kept
			eventBufs.Put(buf)
		}
	}()
	eventHead(buf, ev.Seq, ev.Type)
	d := newDataLines(buf)
	_ = json.NewEncoder(d).Encode(ToStreamEvent(ev))
	d.end()
	return bytes.Clone(buf.Bytes())
}

var eventBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeSnapshot writes a sandboxes_replaced event to w as it encodes it,
// one sandbox at a time.
func writeSnapshot(w io.Writer, ev supervisor.Event) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	eventHead(bw, ev.Seq, ev.Type)
	d := newDataLines(bw)
	// The head without the sandboxes (StreamEvent would write an empty
	// list for a snapshot: its key would come twice).
	head, _ := json.Marshal(struct {
		Type string    `json:"type"`
		Seq  uint64    `json:"seq"`
		Time wire.Time `json:"time"`
	}{ev.Type, ev.Seq, wire.Time{Time: ev.Time}})
	d.Write(head[:len(head)-1]) // without the closing brace
	d.Write([]byte(`,"sandboxes":[`))
	enc := json.NewEncoder(d)
	for i, sb := range ev.All {
		if i > 0 {
			d.Write([]byte(","))
		}
		if err := enc.Encode(ToInfo(sb)); err != nil {
			return err
		}
	}
	d.Write([]byte("]}"))
	d.end()
	return bw.Flush()
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
	if ev.Type == supervisor.EventReplaced {
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
