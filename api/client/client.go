// Package client is the Go client of the agent-control-plane /v1 API. Every
// call has a short deadline, so a dead or hung daemon fails fast and
// closed; errors from the daemon carry its code.
//
// This file is long because it is the Go client's surface, one short
// method per route of the API; split by route, one type's methods would
// be scattered.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// DefaultURL is where the daemon listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:4025"

// URLEnv names the environment variable that overrides DefaultURL.
const URLEnv = "AGENT_CONTROL_PLANE_URL"

// DefaultTimeout bounds each call. Stop and Delete get StopAllowance more,
// since a stop may wait out the child's grace period.
const (
	DefaultTimeout = 5 * time.Second
	StopAllowance  = 35 * time.Second
)

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base    string
	http    *http.Client
	timeout time.Duration
	// token is the bearer token given with WithToken; without one it is
	// found as the daemon finds it (auth.Find), at the first call that
	// needs it, so that a client made before `ensure` started the daemon
	// (which creates the token file) still finds it.
	token     string
	tokenMu   sync.Mutex
	tokenErr  error
	tokenOnce bool
	// Warn receives non-fatal notices (an apiVersion mismatch). Default:
	// nothing.
	Warn func(string)
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout sets the per-call deadline.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithToken sets the bearer token. Without it the client uses
// $AGENT_CONTROL_PLANE_TOKEN, else the token file
// ($AGENT_CONTROL_PLANE_TOKEN_FILE, else
// ~/.local/state/agent-control-plane/token).
func WithToken(token string) Option {
	return func(c *Client) {
		c.token = token
		c.tokenOnce = token != ""
	}
}

// authorize adds the bearer token to req.
func (c *Client) authorize(req *http.Request) {
	c.tokenMu.Lock()
	if !c.tokenOnce {
		c.token, c.tokenErr = auth.Find(os.Getenv, "")
		c.tokenOnce = c.token != "" || c.tokenErr != nil
	}
	token := c.token
	c.tokenMu.Unlock()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// unauthorized adds why no token was sent to a 401 answer.
func (c *Client) unauthorized(e *Error) error {
	c.tokenMu.Lock()
	err, token := c.tokenErr, c.token
	c.tokenMu.Unlock()
	switch {
	case err != nil:
		e.Message += " (the token could not be read: " + err.Error() + ")"
	case token == "":
		e.Message += " (no token found: set $" + auth.TokenEnv + " or pass --token)"
	}
	return e
}

// New returns a client for baseURL; an empty baseURL means
// $AGENT_CONTROL_PLANE_URL, else the address the daemon wrote beside its
// token (auth.AddressFile), else DefaultURL. A bare host:port (as people
// type it: localhost:4025) means http://host:port.
func New(baseURL string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = os.Getenv(URLEnv)
	}
	if baseURL == "" {
		baseURL = auth.FindAddress(os.Getenv)
	}
	if baseURL == "" {
		baseURL = DefaultURL
	}
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	c := &Client{
		base:    strings.TrimRight(baseURL, "/"),
		timeout: DefaultTimeout,
		http: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // a loopback daemon is never behind a proxy
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
		}},
		Warn: func(string) {},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// URL returns the daemon's base URL.
func (c *Client) URL() string { return c.base }

// BrowserLink asks the daemon for a one-time link that signs a browser in
// to its dashboard: the daemon's address with the code in the fragment,
// good for one use within a minute. It needs the token (a dashboard
// session cannot make links).
func (c *Client) BrowserLink(ctx context.Context) (string, wire.DashboardLink, error) {
	var l wire.DashboardLink
	if err := c.do(ctx, c.timeout, "POST", "/v1/dashboard/links", nil, &l); err != nil {
		return "", l, err
	}
	return c.base + "/#code=" + l.Code, l, nil
}

// DashboardSessions lists the browsers signed in to the dashboard.
func (c *Client) DashboardSessions(ctx context.Context) ([]wire.DashboardSession, error) {
	var out wire.DashboardSessionList
	err := c.do(ctx, c.timeout, "GET", "/v1/dashboard/sessions", nil, &out)
	return out.Items, err
}

// RevokeDashboardSession signs one browser out; an empty id signs out
// every browser.
func (c *Client) RevokeDashboardSession(ctx context.Context, id string) error {
	path := "/v1/dashboard/sessions"
	if id != "" {
		path += "/" + url.PathEscape(id)
	}
	return c.do(ctx, c.timeout, "DELETE", path, nil, nil)
}

// Error is an error answer from the daemon.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code wire.ErrorCode) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == string(code)
}

// ErrUnavailable means no daemon answered at the URL.
var ErrUnavailable = errors.New("agent-control-plane is not running")

// UnavailableError wraps ErrUnavailable with the URL and the cause.
type UnavailableError struct {
	URL   string
	Cause error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("no agent-control-plane at %s (%v); start it with 'agent-control-plane serve' or 'agent-control-plane ensure', or point at the one running with --url or $%s", e.URL, e.Cause, URLEnv)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Cause} }

// do sends one request and decodes a 2xx JSON answer into out (if not
// nil). Non-2xx answers become *Error.
func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return c.answerError(resp, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				return c.notDaemon(resp)
			}
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// answerError is the error a non-2xx answer with body b stands for: the
// daemon's *Error, or, when the body is no error of ours, ErrNotDaemon
// (whatever answers is not the daemon: a page of HTML from another
// server, say; one line, never its body).
func (c *Client) answerError(resp *http.Response, b []byte) error {
	var eb wire.ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return c.notDaemon(resp)
	}
	e := &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	if resp.StatusCode == http.StatusUnauthorized {
		return c.unauthorized(e)
	}
	return e
}

// ErrNotDaemon is wrapped when what answers at the URL is not an
// agent-control-plane daemon.
var ErrNotDaemon = errors.New("not an agent-control-plane daemon")

func (c *Client) notDaemon(resp *http.Response) error {
	what := resp.Status
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		what += ", " + ct
	}
	return fmt.Errorf("%s is %w (it answered %s)", c.base, ErrNotDaemon, what)
}

func (c *Client) transportError(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) {
		// Name the failing operation ("connect: connection refused"), not
		// the whole URL again.
		cause := err
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			cause = op.Err
		}
		return &UnavailableError{URL: c.base, Cause: cause}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &UnavailableError{URL: c.base, Cause: errors.New("timed out")}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// It took the connection and closed it without an answer, or
		// answered something that is not HTTP: no daemon of ours does.
		return fmt.Errorf("%s is %w (it closed the connection without an HTTP answer)", c.base, ErrNotDaemon)
	}
	if strings.Contains(err.Error(), "malformed HTTP") { // net/http says no more than that
		return fmt.Errorf("%s is %w (it answered something that is not HTTP)", c.base, ErrNotDaemon)
	}
	return err
}

func esc(id string) string { return url.PathEscape(id) }

// Info fetches /v1/info and checks that the peer is agent-control-plane.
// An apiVersion other than this client's is reported through Warn.
func (c *Client) Info(ctx context.Context) (wire.Info, error) {
	var info wire.Info
	if err := c.do(ctx, c.timeout, "GET", "/v1/info", nil, &info); err != nil {
		var ae *Error
		if errors.As(err, &ae) || strings.Contains(err.Error(), "decode answer") {
			return info, fmt.Errorf("%s is %w: %v", c.base, ErrNotDaemon, err)
		}
		return info, err
	}
	if info.Name != wire.Name {
		return info, fmt.Errorf("%s is %w (it says it is %q)", c.base, ErrNotDaemon, info.Name)
	}
	if info.APIVersion != wire.APIVersion {
		c.Warn(fmt.Sprintf("daemon at %s speaks API version %s; this client speaks %s", c.base, info.APIVersion, wire.APIVersion))
	}
	return info, nil
}

// Snapshots lists the snapshots the daemon runs (GET /v1/snapshots).
func (c *Client) Snapshots(ctx context.Context) ([]wire.Snapshot, error) {
	var list wire.SnapshotList
	if err := c.do(ctx, c.timeout, "GET", "/v1/snapshots", nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func labelQuery(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	q := url.Values{}
	for k, v := range labels {
		q.Set("label."+k, v)
	}
	return "?" + q.Encode()
}

// List returns the sandboxes whose labels match all of labels.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]wire.SandboxInfo, error) {
	var out wire.ListResponse
	err := c.do(ctx, c.timeout, "GET", "/v1/sandboxes"+labelQuery(labels), nil, &out)
	return out.Sandboxes, err
}

// ListOptions choose a page of the list.
type ListOptions struct {
	Labels map[string]string // all must match
	States []string          // any of these; empty: every state
	Limit  int               // page size, 1 to 1000; 0: the whole list
	Cursor string            // NextCursor of the page before; empty: from the start
	Usage  bool              // each live sandbox's usage too (SandboxInfo.Usage)
}

// ListAll returns every sandbox that matches o (its Limit and Cursor are
// ignored), walking the pages so that no answer holds more than a page.
func (c *Client) ListAll(ctx context.Context, o ListOptions) ([]wire.SandboxInfo, error) {
	var all []wire.SandboxInfo
	o.Limit, o.Cursor = 1000, ""
	for {
		page, next, err := c.ListPage(ctx, o)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		o.Cursor = next
	}
}

// ListPage returns one page of sandboxes, oldest first, and the cursor of
// the next page ("" after the last). Walking the pages sees every sandbox
// that exists throughout the walk exactly once.
func (c *Client) ListPage(ctx context.Context, o ListOptions) ([]wire.SandboxInfo, string, error) {
	q := url.Values{}
	for k, v := range o.Labels {
		q.Add("label", k+"="+v)
	}
	if len(o.States) > 0 {
		q.Set("states", strings.Join(o.States, ","))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Usage {
		q.Set("usage", "true")
	}
	path := "/v1/sandboxes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out wire.ListResponse
	err := c.do(ctx, c.timeout, "GET", path, nil, &out)
	return out.Sandboxes, out.NextCursor, err
}

// Create creates a sandbox; it is returned in state starting.
func (c *Client) Create(ctx context.Context, req wire.CreateSandboxRequest) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes", req, &out)
	return out, err
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	err := c.do(ctx, c.timeout, "GET", "/v1/sandboxes/"+esc(id), nil, &out)
	return out, err
}

// Stop stops a sandbox; force skips the grace period. Start runs it again.
func (c *Client) Stop(ctx context.Context, id string, force bool) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	path := "/v1/sandboxes/" + esc(id) + "/stop"
	if force {
		path += "?force=true"
	}
	err := c.do(ctx, c.timeout+StopAllowance, "POST", path, nil, &out)
	return out, err
}

// Start starts a stopped sandbox again, in place (its files kept); a
// running one comes back as it is. The answer is the sandbox starting:
// WaitForReady waits for it.
func (c *Client) Start(ctx context.Context, id string) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/start", nil, &out)
	return out, err
}

// Delete stops a sandbox if needed and removes it. Deleting a sandbox that
// does not exist succeeds.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, c.timeout+StopAllowance, "DELETE", "/v1/sandboxes/"+esc(id), nil, nil)
}

// RefreshActivity is the keep-alive.
func (c *Client) RefreshActivity(ctx context.Context, id string) error {
	return c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/refresh-activity", nil, nil)
}

// Resize changes a running sandbox's limits; nil fields keep theirs, 0
// lifts one.
func (c *Client) Resize(ctx context.Context, id string, l wire.Limits) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/resize", l, &out)
	return out, err
}

// SetAutostopInterval sets the idle interval in minutes; 0 disables.
func (c *Client) SetAutostopInterval(ctx context.Context, id string, minutes float64) (wire.SandboxInfo, error) {
	var out wire.SandboxInfo
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/autostop", wire.AutostopRequest{Interval: ptr(float64(minutes))}, &out)
	return out, err
}

func ptr[T any](v T) *T { return &v }

// LogsOptions pick which of a sandbox's log lines are returned; the zero
// value is the daemon's default (the last 64 KiB of each stream).
type LogsOptions struct {
	TailBytes  int    // of each stream, at most (1 to 1 MiB)
	Lines      int    // the last this many lines of both streams
	Since      string // a time or a duration before now (wire.ParseSince)
	Until      string // only lines written before it (as Since)
	Stream     string // "stdout" or "stderr" only
	Timestamps bool   // Output's lines after their time
	// All: FollowLogs from the oldest line kept on disk, with no byte
	// bound (TailBytes and Lines are not used); ReadLogs always is.
	All bool
}

// query is o as entrypoint-logs parameters.
func (o LogsOptions) query() url.Values {
	v := url.Values{}
	if o.TailBytes > 0 {
		v.Set("tailBytes", strconv.Itoa(o.TailBytes))
	}
	if o.Lines > 0 {
		v.Set("tail", strconv.Itoa(o.Lines))
	}
	if o.Since != "" {
		v.Set("since", o.Since)
	}
	if o.Until != "" {
		v.Set("until", o.Until)
	}
	if o.Stream != "" {
		v.Set("stream", o.Stream)
	}
	if o.All {
		v.Set("all", "true")
	}
	if o.Timestamps {
		v.Set("timestamps", "true")
	}
	return v
}

// EntrypointLogs returns the redacted end of the sandbox's output, as o
// picks it.
func (c *Client) EntrypointLogs(ctx context.Context, id string, o LogsOptions) (wire.LogsResponse, error) {
	var out wire.LogsResponse
	path := "/v1/sandboxes/" + esc(id) + "/entrypoint-logs"
	if q := o.query().Encode(); q != "" {
		path += "?" + q
	}
	err := c.do(ctx, c.timeout, "GET", path, nil, &out)
	return out, err
}

// PreviewURL returns the agent-server's URL.
func (c *Client) PreviewURL(ctx context.Context, id string) (string, error) {
	var out wire.PreviewURLResponse
	err := c.do(ctx, c.timeout, "GET", "/v1/sandboxes/"+esc(id)+"/preview-url?port=4000", nil, &out)
	return out.URL, err
}

// NotReadyError says why a sandbox will never become ready.
type NotReadyError struct {
	ID          string
	State       string
	ErrorReason string
}

func (e *NotReadyError) Error() string {
	if e.ErrorReason != "" {
		return fmt.Sprintf("sandbox %s is %s: %s", e.ID, e.State, e.ErrorReason)
	}
	return fmt.Sprintf("sandbox %s is %s", e.ID, e.State)
}

// WaitForReady waits, through the event stream, for the daemon's word
// that the sandbox is started (its own readiness probe, on its ready path,
// has passed), or until ctx ends (then ctx's error). A sandbox that stops
// or is deleted first yields a *NotReadyError with its errorReason; one
// that does not exist, a *NotReadyError with state "destroyed".
func (c *Client) WaitForReady(ctx context.Context, id string) (wire.SandboxInfo, error) {
	var sb wire.SandboxInfo
	errStarted := errors.New("started")
	notReady := func(s wire.SandboxInfo) error {
		reason := ""
		if s.ErrorReason != nil {
			reason = *s.ErrorReason
		}
		return &NotReadyError{ID: id, State: s.State, ErrorReason: reason}
	}
	check := func(s wire.SandboxInfo) error {
		sb = s
		switch s.State {
		case wire.StateStarted:
			return errStarted
		case wire.StateStopped, wire.StateDestroyed:
			return notReady(s)
		}
		return nil
	}
	err := c.Watch(ctx, nil, func(ev wire.StreamEvent) error {
		if ev.Type == wire.EventReplaced {
			for _, s := range ev.Sandboxes {
				if s.ID == id {
					return check(s)
				}
			}
			return notReady(wire.SandboxInfo{ID: id, State: wire.StateDestroyed})
		}
		if ev.Sandbox == nil || ev.Sandbox.ID != id {
			return nil
		}
		if ev.Type == wire.EventDeleted {
			s := *ev.Sandbox
			s.State = wire.StateDestroyed
			return check(s)
		}
		return check(*ev.Sandbox)
	})
	switch {
	case errors.Is(err, errStarted):
		return sb, nil
	case err == nil: // ctx ended
		return sb, ctx.Err()
	}
	return sb, err
}
