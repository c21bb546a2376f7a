package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/proc/probe"
)

// Watch follows /v1/events for sandboxes whose labels match all of labels
// and calls handler for each event, in order, until ctx ends or handler
// returns an error (which Watch then returns). The first event is a
// sandboxes_replaced snapshot.
//
// When the stream drops, Watch reconnects with Last-Event-ID: the daemon
// replays what was missed, or sends a fresh snapshot when it can no longer
// (handler then sees a second sandboxes_replaced and must treat it as the
// whole truth). An event is never delivered twice, and none is skipped.
// Cancellation returns nil.
func (c *Client) Watch(ctx context.Context, labels map[string]string, handler func(wire.StreamEvent) error) error {
	return c.WatchOutages(ctx, labels, handler, nil)
}

// Outage is told when a Watch loses the daemon (Lost, with why) and when
// it has it again (Lost false): what came in between is replayed, or a
// fresh sandboxes_replaced says the whole truth.
type Outage struct {
	Lost bool
	Err  error
}

// WatchOutages is Watch that also tells outage each time the stream is
// lost and each time it is back (nil: nothing is told).
func (c *Client) WatchOutages(ctx context.Context, labels map[string]string, handler func(wire.StreamEvent) error, outage func(Outage)) error {
	if outage == nil {
		outage = func(Outage) {}
	}
	var last uint64
	attempt := 0
	lost := false
	for {
		delivered, err := c.watchOnce(ctx, labels, &last, handler, func() {
			if lost {
				lost = false
				outage(Outage{})
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		var he handlerError
		if errors.As(err, &he) {
			return he.err
		}
		var ae *Error
		if errors.As(err, &ae) && ae.Status/100 == 4 || errors.Is(err, ErrNotDaemon) {
			return err // a bad filter, or another server, will not get better
		}
		if delivered {
			attempt = 0
		}
		if !lost {
			lost = true
			if err == nil {
				err = errors.New("the stream ended")
			}
			outage(Outage{Lost: true, Err: err})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(probe.Reconnect.Delay(attempt)):
		}
		attempt++
	}
}

// IdleTimeout is how long a Watch stream may stay silent before it is
// taken for dead and reconnected. The daemon sends a heartbeat every 15 s.
var IdleTimeout = 45 * time.Second

type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

// watchOnce runs one connection. It reports whether it delivered anything.
func (c *Client) watchOnce(ctx context.Context, labels map[string]string, last *uint64, handler func(wire.StreamEvent) error, opened func()) (bool, error) {
	var resume string
	if *last > 0 {
		resume = strconv.FormatUint(*last, 10)
	}
	er, closeStream, err := c.openStream(ctx, "/v1/events"+labelQuery(labels), resume)
	if err != nil {
		return false, err
	}
	opened()
	defer closeStream()
	delivered := false
	for {
		raw, err := er.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return delivered, err
		}
		var ev wire.StreamEvent
		if err := json.Unmarshal(raw.Data, &ev); err != nil {
			return delivered, fmt.Errorf("decode event: %w", err)
		}
		// A replayed or raced event at or below the last delivered id is
		// a duplicate; a snapshot always replaces the view.
		if ev.Type != wire.EventReplaced && ev.Seq <= *last {
			continue
		}
		*last = ev.Seq
		delivered = true
		if err := handler(ev); err != nil {
			return delivered, handlerError{err}
		}
	}
}

// openStream opens the event stream at path (resuming after lastID when
// not empty) and returns its reader and what closes it. The answer's head
// must come within the call timeout; after that the stream may idle, but
// not for longer than IdleTimeout (the daemon's heartbeats keep a healthy
// stream busier than that).
func (c *Client) openStream(ctx context.Context, path, lastID string) (*EventReader, func(), error) {
	return c.openStreamWith(ctx, "GET", path, nil, lastID)
}

// openStreamWith is openStream for a request of method with a JSON body
// (nil: none).
func (c *Client) openStreamWith(ctx context.Context, method, path string, body any, lastID string) (*EventReader, func(), error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	reqCtx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(reqCtx, method, c.base+path, rd)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	idle := time.AfterFunc(c.timeout, cancel)
	resp, err := c.http.Do(req)
	if err != nil {
		idle.Stop()
		cancel()
		return nil, nil, c.transportError(err)
	}
	closeAll := func() { idle.Stop(); resp.Body.Close(); cancel() }
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		closeAll()
		return nil, nil, c.answerError(resp, b)
	}
	// Anything read, heartbeat comments included, proves the stream alive.
	return NewEventReader(readNotify{resp.Body, func() { idle.Reset(IdleTimeout) }}), closeAll, nil
}

// FollowLogs passes fn the sandbox's entrypoint logs as o picks them, and
// then each line as it is written (both streams in the order they were
// written), redacted, with its stream ("stdout" or "stderr"), until the
// sandbox stops (its state then is returned), ctx ends or fn fails.
// o.Timestamps changes nothing: every chunk carries its time.
func (c *Client) FollowLogs(ctx context.Context, id string, o LogsOptions, fn func(stream string, chunk wire.LogChunk) error) (wire.SandboxInfo, error) {
	q := o.query()
	q.Set("follow", "true")
	return c.streamLogs(ctx, id, q, fn)
}

// ReadLogs passes fn every line of the sandbox's logs kept on disk that o
// picks (Since, Until, Stream), oldest first, both streams in write
// order, with no byte bound, and returns the sandbox once they are read.
func (c *Client) ReadLogs(ctx context.Context, id string, o LogsOptions, fn func(stream string, chunk wire.LogChunk) error) (wire.SandboxInfo, error) {
	o.All, o.TailBytes, o.Lines = true, 0, 0
	return c.streamLogs(ctx, id, o.query(), fn)
}

func (c *Client) streamLogs(ctx context.Context, id string, q url.Values, fn func(stream string, chunk wire.LogChunk) error) (wire.SandboxInfo, error) {
	q.Del("timestamps")
	path := "/v1/sandboxes/" + esc(id) + "/entrypoint-logs?" + q.Encode()
	er, closeStream, err := c.openStream(ctx, path, "")
	if err != nil {
		return wire.SandboxInfo{}, err
	}
	defer closeStream()
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return wire.SandboxInfo{}, errors.New("the daemon ended the log stream early (it may be restarting)")
		}
		if err != nil {
			if ctx.Err() != nil {
				return wire.SandboxInfo{}, ctx.Err()
			}
			return wire.SandboxInfo{}, c.transportError(err)
		}
		switch ev.Type {
		case wire.LogEventEnd:
			var sb wire.SandboxInfo
			if err := json.Unmarshal(ev.Data, &sb); err != nil {
				return sb, fmt.Errorf("decode the log stream's end: %w", err)
			}
			return sb, nil
		case "stdout", "stderr":
			var chunk wire.LogChunk
			if err := json.Unmarshal(ev.Data, &chunk); err != nil {
				return wire.SandboxInfo{}, fmt.Errorf("decode log chunk: %w", err)
			}
			if err := fn(ev.Type, chunk); err != nil {
				return wire.SandboxInfo{}, err
			}
		}
	}
}

// readNotify calls f after every read that returned data.
type readNotify struct {
	r io.Reader
	f func()
}

func (r readNotify) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.f()
	}
	return n, err
}
