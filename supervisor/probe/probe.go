// Package probe holds the two ways this project waits for something it
// cannot be told about: a backoff schedule for polling loops, and the HTTP
// readiness probe (there is no kernel event for "serving HTTP"). The
// supervisor, the Go client, the CLI, the bench and the tests all wait
// through it, so each wait has one implementation and named constants.
package probe

import (
	"context"
	"net/http"
	"time"
)

// Backoff is a schedule of waits between attempts: Initial for the first
// Fast attempts, then growing by Factor (default 2) up to Max (default:
// no growth past Initial when zero).
type Backoff struct {
	Initial time.Duration
	Fast    int
	Factor  float64
	Max     time.Duration
}

// Common schedules.
var (
	// Readiness: every millisecond while a healthy agent-server comes up,
	// then backing off so that a slow one costs little.
	Readiness = Backoff{Initial: time.Millisecond, Fast: 25, Factor: 1.5, Max: 100 * time.Millisecond}
	// Reconnect: a dropped stream or a daemon that is restarting.
	Reconnect = Backoff{Initial: 50 * time.Millisecond, Factor: 2, Max: 2 * time.Second}
	// Poll: a client waiting for a state the daemon cannot push.
	Poll = Backoff{Initial: 10 * time.Millisecond, Factor: 2, Max: 250 * time.Millisecond}
)

// Delay is the wait after attempt n (0 is the first attempt).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	if n < b.Fast || b.Max <= d {
		return d
	}
	f := b.Factor
	if f <= 1 {
		f = 2
	}
	for i := b.Fast; i < n && d < b.Max; i++ {
		d = time.Duration(float64(d) * f)
	}
	return min(d, b.Max)
}

// Until calls cond until it reports done or an error, waiting b.Delay
// between calls. It returns cond's error, or ctx's error when ctx ends
// first.
func (b Backoff) Until(ctx context.Context, cond func(context.Context) (bool, error)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for n := 0; ; n++ {
		done, err := cond(ctx)
		if err != nil || done {
			return err
		}
		t.Reset(b.Delay(n))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// HTTP probes URLs for readiness: a 2xx answer to GET. It keeps no
// connection alive (each probe is a fresh connection, as a first client's
// would be) and ignores proxy settings: workloads listen on loopback.
type HTTP struct {
	client *http.Client
}

// NewHTTP returns a probe whose single attempts give up after timeout.
func NewHTTP(timeout time.Duration) *HTTP {
	return &HTTP{client: &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
		Timeout:   timeout,
	}}
}

// Ready reports whether url answers 2xx now.
func (p *HTTP) Ready(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// Await probes url on schedule b until it answers 2xx (nil) or ctx ends
// (ctx's error).
func (p *HTTP) Await(ctx context.Context, url string, b Backoff) error {
	return b.Until(ctx, func(ctx context.Context) (bool, error) { return p.Ready(ctx, url), nil })
}
