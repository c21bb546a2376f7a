// Package probe holds the two ways this project waits for something it
// cannot be told about: a backoff schedule for polling loops, and the HTTP
// readiness probe (there is no kernel event for "serving HTTP"). The
// supervisor, the Go client, the CLI, the bench and the tests all wait
// through it, so each wait has one implementation and named constants.
package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
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
func (p *HTTP) Ready(ctx context.Context, url string) bool { return p.Check(ctx, url) == nil }

// Check is nil when url answers 2xx now, else an error that says in a few
// words what the probe got: "answered 404 Not Found", "connection
// refused", "no answer within 1s".
func (p *HTTP) Check(ctx context.Context, url string) error {
	t, err := prepare(url)
	if err != nil {
		return err
	}
	return p.check(ctx, t)
}

// target is a URL made ready for probing once, however often it is
// probed: Await probes one every millisecond while a workload starts, and
// a request built for each probe was a fifth of what a burst of creates
// allocated.
type target struct {
	req    *http.Request // GET, without a context: each use gives its own
	addr   netip.AddrPort
	direct bool // the host is an address: see address
}

func prepare(url string) (target, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return target{}, err
	}
	req.Close = true // no connection is kept: each probe is a first client's
	t := target{req: req}
	t.addr, t.direct = address(req.URL)
	return t, nil
}

func (p *HTTP) check(ctx context.Context, t target) error {
	if t.direct {
		switch refused, c := look(t.addr); {
		case refused:
			return errRefused
		case t.req.URL.Scheme == "http":
			resp, err := p.get(ctx, t.addr, c, t.req)
			if err != nil {
				return describe(err, p.client.Timeout)
			}
			if resp.StatusCode/100 != 3 {
				return verdict(resp)
			}
			// A redirect: the client follows it, as it does for any URL.
		case c != nil:
			c.Close() // https: the client makes its own connection
		}
	}
	resp, err := p.client.Do(t.req.WithContext(ctx))
	if err != nil {
		return describe(err, p.client.Timeout)
	}
	resp.Body.Close()
	return verdict(resp)
}

// verdict is nil for a 2xx answer, else what the probe got.
func verdict(resp *http.Response) error {
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// get sends req to addr on c, the first look's connection, or on one it
// dials when c is nil, and reads the answer's status line and header,
// never its body; it closes c. It is the probe of a plain-HTTP URL whose
// host is an address (a workload on loopback): one goroutine and under a
// KiB of buffers, where the client's transport starts a dial goroutine, a
// read loop and a write loop and two 4 KiB buffers for each connection,
// and a starting workload that listens but does not answer yet holds them
// for up to the timeout. In a burst of 500 creates that was about a third
// of the daemon's goroutines.
func (p *HTTP) get(ctx context.Context, addr netip.AddrPort, c net.Conn, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.client.Timeout)
	defer cancel()
	if c == nil {
		var d net.Dialer
		var err error
		if c, err = d.DialContext(ctx, "tcp", addr.String()); err != nil {
			return nil, err
		}
	}
	defer c.Close()
	// The deadline, or the caller's cancel, ends a read or write under way.
	defer context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })()
	w := bufio.NewWriterSize(c, 256)
	if err := req.Write(w); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, 512)
	for {
		resp, err := http.ReadResponse(r, req)
		if err != nil {
			return nil, err
		}
		// An interim answer (100 Continue, 103 Early Hints) precedes the
		// one that counts, as the transport reads it.
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

var errRefused = errors.New("connection refused (nothing listens on the port)")

// describe says what a failed request got, without its URL.
func describe(err error, timeout time.Duration) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("connection closed without an answer")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer within %s", timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Await probes url on schedule b until it answers 2xx (nil) or ctx ends:
// then ctx's error, with what the last probe got when there was one.
func (p *HTTP) Await(ctx context.Context, url string, b Backoff) error {
	t, err := prepare(url)
	if err != nil {
		return err // no wait makes a malformed URL answer
	}
	var last error
	err = b.Until(ctx, func(ctx context.Context) (bool, error) {
		if err := p.check(ctx, t); err != nil {
			if ctx.Err() == nil { // not cut short by the deadline itself
				last = err
			}
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return &NotReadyError{Err: err, Last: last}
	}
	return err
}

// NotReadyError is an Await that ended before url answered 2xx.
type NotReadyError struct {
	Err  error // why the wait ended (the context's error)
	Last error // what the last probe got
}

func (e *NotReadyError) Error() string { return e.Err.Error() + "; the last probe " + e.Got() }
func (e *NotReadyError) Unwrap() error { return e.Err }

// Got says what the last probe got, as a predicate: "answered 404 Not
// Found", "got connection refused (…)".
func (e *NotReadyError) Got() string {
	s := e.Last.Error()
	if strings.HasPrefix(s, "answered ") {
		return s
	}
	return "got " + s
}
