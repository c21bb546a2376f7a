package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor/probe"
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
	var last uint64
	attempt := 0
	for {
		delivered, err := c.watchOnce(ctx, labels, &last, handler)
		if ctx.Err() != nil {
			return nil
		}
		var he handlerError
		if errors.As(err, &he) {
			return he.err
		}
		var ae *Error
		if errors.As(err, &ae) && ae.Status/100 == 4 {
			return err // a bad filter will not get better
		}
		if delivered {
			attempt = 0
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
func (c *Client) watchOnce(ctx context.Context, labels map[string]string, last *uint64, handler func(wire.StreamEvent) error) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/events"+labelQuery(labels), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*last, 10))
	}
	// The answer's head must come within the call timeout; after that the
	// stream may idle, but not for longer than IdleTimeout (the daemon's
	// heartbeats keep a healthy stream busier than that).
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(c.timeout, cancel)
	defer idle.Stop()
	resp, err := c.http.Do(req.WithContext(reqCtx))
	if err != nil {
		return false, c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb wire.ErrorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		e := &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
		if resp.StatusCode == http.StatusUnauthorized {
			return false, c.unauthorized(e)
		}
		return false, e
	}
	delivered := false
	// Anything read, heartbeat comments included, proves the stream alive.
	er := NewEventReader(readNotify{resp.Body, func() { idle.Reset(IdleTimeout) }})
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
		if ev.Type != wire.EventSnapshot && ev.Seq <= *last {
			continue
		}
		*last = ev.Seq
		delivered = true
		if err := handler(ev); err != nil {
			return delivered, handlerError{err}
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
