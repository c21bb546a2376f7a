// Package api serves the daemon's Daytona-shaped /v1 HTTP API, its SSE
// event feed and /metrics over a Supervisor interface it declares itself.
// It owns the wire shapes, the browser guard and input decoding; the
// supervisor owns every decision about sandboxes.
//
// This file is long because it is the host (listener, guard, dispatch,
// error mapping) and /v1's server at once; the host and face split issue
// 41 plans divides it.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/session"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// Supervisor is what /v1, its event feed, its metrics and the dashboard
// call of the sandbox supervisor, and nothing more (Daytona's face
// declares its own: Options.Daytona). Each method's contract is the one
// documented on supervisor.Supervisor.
type Supervisor interface {
	Create(ctx context.Context, req supervisor.CreateRequest) (supervisor.Sandbox, error)
	Get(id string) (supervisor.Sandbox, error)
	ListPage(o supervisor.ListOptions) (page []supervisor.Sandbox, more bool)
	Stop(ctx context.Context, id string, force bool) (supervisor.Sandbox, error)
	Start(ctx context.Context, id string) (supervisor.Sandbox, error)
	Delete(ctx context.Context, id string) error
	RefreshActivity(id string) error
	SetAutoStop(id string, interval time.Duration) (supervisor.Sandbox, error)
	Resize(ctx context.Context, id string, l supervisor.Limits) (supervisor.Sandbox, error)
	EnvKeys(id string) ([]string, error)
	EntrypointLogs(ctx context.Context, id string, q supervisor.LogQuery) (supervisor.Logs, error)
	FollowLogs(ctx context.Context, id string, q supervisor.LogQuery, emit func(supervisor.LogChunk) error) (supervisor.Sandbox, error)
	Subscribe(f supervisor.Filter, after *uint64) (*supervisor.Subscription, []supervisor.Event)
	Stats() supervisor.Stats
	Meter(ctx context.Context, sbs []supervisor.Sandbox)
	UsageByRuntime(ctx context.Context) map[string]runtime.Usage
	Root() string
	PortRange() (lo, hi int)
	Runtimes() []string
	Unavailable(ctx context.Context) map[string]string
	Snapshots() []snapshot.Snapshot
	Confined(id string) (bool, error)
	SetCredentials(values ...string)
	// The toolbox.
	Run(ctx context.Context, id string, spec supervisor.RunSpec) (supervisor.RunResult, error)
	Files(id string) (runtime.Files, error)
	CreateSession(id, sid string) (*shell.Session, error)
	DeleteSession(id, sid string) error
	SessionRun(id, sid, line string) (*shell.Command, error)
	CommandOutput(id string, c *shell.Command) supervisor.CommandOutput
}

// Options configure a Server.
type Options struct {
	// Daytona is what Daytona's face calls of the supervisor; nil
	// serves no /api.
	Daytona   daytona.Supervisor
	Version   string
	Logger    *slog.Logger
	Registry  *prometheus.Registry // metrics are registered here; nil: none
	Heartbeat time.Duration        // SSE comment period; default 15s
	// AllowHosts are host names accepted besides loopback ones (the
	// listen host when the daemon is exposed on purpose).
	AllowHosts []string
	// Token is the bearer token every route but GET /v1/info (and
	// /metrics, unless MetricsAuth) requires. Required.
	Token       string
	MetricsAuth bool
	// BodyTimeout bounds reading a request's body (default 30s): a body
	// that does not arrive in time closes its connection. Event streams,
	// which have no body, are not affected.
	BodyTimeout time.Duration
	// MaxConns caps concurrent connections (default 1024); past it, a new
	// connection takes the place of the one quiet for longest (idle
	// between requests, or silent since it opened), and waits in the
	// kernel's backlog while every one is busy: no client exhausts the
	// daemon's file descriptors, and idle ones cannot keep the owner out.
	MaxConns int
	// Cgroups is what /v1/info says of native sandboxes' containment;
	// nil says nothing.
	Cgroups *wire.Cgroups
	// ReadyPath and StartupTimeout are shown in /v1/info, so clients can
	// say what they wait for, and for how long.
	ReadyPath      string
	StartupTimeout time.Duration
	StopGrace      time.Duration // shown in /v1/info
	// Sessions keeps the dashboard's browser sessions across restarts
	// (only hashes of their secrets); nil: in memory only. The daemon
	// gives its supervisor (the file is in the root).
	Sessions session.Disk
	// SessionTTL is how long a dashboard session lasts; default 24 h.
	SessionTTL time.Duration
	// Now is the sessions' clock; default time.Now (tests move it).
	Now func() time.Time
	// MaxUpload bounds one toolbox upload (default daytona.DefaultUpload).
	MaxUpload int64
}

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = wire.MaxBodyBytes

// Server is the HTTP face of one Supervisor.
type Server struct {
	sup       Supervisor
	opts      Options
	log       *slog.Logger
	startedAt time.Time
	handler   http.Handler
	metrics   *httpMetrics
	encoded   encodedEvents
	token     atomic.Pointer[string]
	sessions  *session.Store
}

// New builds the server and registers its metrics.
func New(sup Supervisor, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 30 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 1024
	}
	s := &Server{sup: sup, opts: opts, log: opts.Logger, startedAt: time.Now()}
	sessions, err := session.Open(opts.Token, session.Options{Disk: opts.Sessions, TTL: opts.SessionTTL, Now: opts.Now})
	if err != nil {
		s.log.Warn("dashboard sessions could not be read back; browsers sign in again", "err", err)
	}
	s.sessions = sessions
	if err := s.SetToken(opts.Token); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", http.HandlerFunc(s.home))
	for _, f := range uiAssets() {
		mux.Handle("GET /ui/"+f, http.HandlerFunc(uiAsset))
	}
	all := routes
	var dt *daytona.API
	if opts.Daytona != nil {
		dt = s.newDaytona(opts.Daytona)
		all = slices.Concat(routes, daytonaRoutes(dt))
	}
	for path, methods := range routesByPath(all) {
		mux.Handle(path, s.dispatch(path, methods))
	}
	if opts.Registry != nil {
		m, err := newHTTPMetrics(opts.Registry)
		if err != nil {
			return nil, err
		}
		s.metrics = m
		if err := opts.Registry.Register(newCollector(sup)); err != nil {
			return nil, err
		}
		if err := opts.Registry.Register(newBuildInfo(opts.Version)); err != nil {
			return nil, err
		}
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry}))
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, wire.CodeNotFound, "no route "+quote(r.URL.Path))
	}))
	top := http.NewServeMux()
	if dt != nil {
		preview := s.previewHandler(dt)
		top.Handle(daytona.PreviewPath+"/{id}/{port}", preview)
		top.Handle(daytona.PreviewPath+"/{id}/{port}/{rest...}", preview)
	}
	top.Handle("/", s.guard(mux))
	s.handler = top
	return s, nil
}

// SetToken replaces the bearer token (a rotation); requests that carry the
// old one, and every dashboard session, are refused from now on.
func (s *Server) SetToken(token string) error {
	if err := auth.Validate(token); err != nil {
		return fmt.Errorf("api token: %w", err)
	}
	s.token.Store(&token)
	s.sup.SetCredentials(token) // redacted from whatever a workload prints
	if err := s.sessions.Rotate(token); err != nil {
		s.log.Warn("dashboard sessions: the file could not be rewritten after the rotation", "err", err)
	}
	return nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Run serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting first, lets every connection it has accepted get its request
// answered (Go's Shutdown would drop a request that arrives after it began:
// with a socket passed by systemd, those clients would see a closed
// connection although the next daemon is about to serve the same socket),
// then shuts down; open event streams end with ctx, in-flight requests get
// up to 10 s. Cancellation is not an error.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	var mu sync.Mutex
	fresh := map[net.Conn]bool{}   // accepted, no request read yet
	read := make(chan struct{}, 1) // a fresh connection's request was read
	quiet := newQuietConns()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState: func(c net.Conn, st http.ConnState) {
			quiet.track(c, st)
			mu.Lock()
			if st == http.StateNew {
				fresh[c] = true
			} else if fresh[c] {
				delete(fresh, c)
				select {
				case read <- struct{}{}:
				default:
				}
			}
			mu.Unlock()
		},
	}
	errc := make(chan error, 1)
	ln = limitListener(ln, s.opts.MaxConns, quiet)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Stop accepting. Once Serve has returned, every accepted connection
	// is tracked; wait (briefly) for each to have its request read.
	ln.Close()
	<-errc
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	for {
		mu.Lock()
		n := len(fresh)
		mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-read:
			continue
		case <-deadline.C:
		}
		break
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// route is one API endpoint. The table in routes.go is sorted by a test.
type route struct {
	method  string
	path    string
	handler func(*Server, http.ResponseWriter, *http.Request)
	mutates bool // logged when it succeeds
	access  access
}

// access says who may call a route.
type access int

const (
	member    access = iota // the token or a dashboard session
	open                    // anyone (the browser guard still applies)
	tokenOnly               // the token itself, never a dashboard session
	// inside reaches into a sandbox (commands, files, shell sessions):
	// the token, or a dashboard session where the sandbox is confined. A
	// workload that is not (a native sandbox, running as the daemon's
	// user) can read the token file: a session that could run commands
	// there could become the token.
	inside
)

// Route names one operation of the API.
type Route struct {
	Method, Path string
	Open         bool // needs no credential
}

// Routes lists every operation of the /v1 API, in the route table's order,
// for the contract test.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, rt := range routes {
		out[i] = Route{rt.method, rt.path, rt.access == open}
	}
	return out
}

func routesByPath(all []route) map[string]map[string]route {
	out := map[string]map[string]route{}
	for _, rt := range all {
		if out[rt.path] == nil {
			out[rt.path] = map[string]route{}
		}
		out[rt.path][rt.method] = rt
	}
	return out
}

// dispatch serves one path: it picks the handler by method (405 with Allow
// otherwise) and records metrics under the route's pattern.
func (s *Server) dispatch(path string, methods map[string]route) http.Handler {
	var allow []string
	for m := range methods {
		allow = append(allow, m)
	}
	slices.Sort(allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, ok := methods[r.Method]
		if !ok && r.Method == http.MethodHead {
			rt, ok = methods[http.MethodGet]
		}
		if !ok {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.fail(w, r, wire.CodeMethodNotAllowed, r.Method+" is not allowed on "+path)
			return
		}
		who := callerOf(r.Context())
		if rt.access == tokenOnly && who.session != "" {
			s.fail(w, r, wire.CodeTokenRequired, r.Method+" "+path+" needs the daemon's token; a dashboard session may not call it")
			return
		}
		if rt.access == inside && who.session != "" {
			if confined, err := s.sup.Confined(r.PathValue("id")); err == nil && !confined {
				s.fail(w, r, wire.CodeTokenRequired, "a dashboard session may not reach inside "+quote(r.PathValue("id"))+": its processes run as the daemon's user and can read the daemon's token; use the CLI, which holds the token")
				return
			}
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		start := time.Now()
		rt.handler(s, rec, r)
		if s.metrics != nil {
			stream := rec.Header().Get("Content-Type") == "text/event-stream"
			s.metrics.observe(rt.method+" "+path, rec.code, time.Since(start), stream)
		}
		if rt.mutates && rec.code < 300 {
			s.log.Info("request", "method", r.Method, "route", path, "id", r.PathValue("id"), "status", rec.code, "by", who.String())
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code    int
	written bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.written {
		r.code, r.written = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.written = true
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// guard runs before any handler. It answers only requests addressed to a
// loopback host (a DNS-rebinding page names its own host), refuses
// cross-site browser requests (an Origin other than a localhost one),
// requires the bearer token (or a dashboard session's secret) on every
// route but the open ones, and makes any request that carries a body declare
// JSON, so that a simple form post from another site cannot pass.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowedHost(r.Host) {
			s.fail(w, r, wire.CodeForbiddenHost, "host "+quote(r.Host)+" is not allowed; use 127.0.0.1 or localhost")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !allowedOrigin(origin) {
				s.fail(w, r, wire.CodeForbiddenOrigin, "origin "+quote(origin)+" is not allowed; only http://localhost:* and http://127.0.0.1:* may call this daemon")
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "Content-Type")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, X-Daytona-Organization-ID, X-Daytona-Source, X-Daytona-SDK-Version")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if err := checkQuery(r.URL.RawQuery); err != nil {
			s.fail(w, r, wire.CodeInvalidRequest, err.Error())
			return
		}
		who, ok := s.authorize(r)
		if !ok && !s.open(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agent-control-plane"`)
			s.fail(w, r, wire.CodeUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>; the CLI and the Go client read it from $"+auth.TokenEnv+" or the token file (default ~/.local/state/agent-control-plane/token)")
			return
		}
		if up := uploadType(r); up != "" && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			// A file upload, which its handler bounds (max_upload_bytes)
			// and gives time to arrive. A form post from another site
			// has no bearer token: refused above.
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != up {
				s.fail(w, r, wire.CodeUnsupportedMediaType, "an upload here must have Content-Type: "+up)
				return
			}
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(uploadDeadline))
		} else if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				s.fail(w, r, wire.CodeUnsupportedMediaType, "a request with a body must have Content-Type: application/json")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
			// The body must arrive in time; the header already had to
			// (ReadHeaderTimeout). Streams have no body and keep no
			// read deadline.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		}
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), who)))
	})
}

// allowedHost reports whether a Host header is exactly a host the daemon
// answers to (a loopback one, or one of AllowHosts) and, if it has one, a
// port: "127.0.0.1:4025.evil.example" is not, so nothing built from the
// Host header (preview and toolbox URLs) carries anything else.
// Bounds of a request's query (the API's; a preview's goes to its
// workload as it is).
const (
	MaxQueryBytes  = 16 << 10
	MaxQueryParams = 64
)

// checkQuery refuses a query that cannot be read whole: one that does not
// parse (r.URL.Query drops what it cannot read, and a filter dropped
// answers everything), or past the bounds.
func checkQuery(raw string) error {
	if raw == "" {
		return nil
	}
	if len(raw) > MaxQueryBytes {
		return fmt.Errorf("the query is %d bytes; at most %d", len(raw), MaxQueryBytes)
	}
	if n := strings.Count(raw, "&") + strings.Count(raw, ";") + 1; n > MaxQueryParams {
		return fmt.Errorf("the query has %d parameters; at most %d", n, MaxQueryParams)
	}
	if _, err := url.ParseQuery(raw); err != nil {
		return fmt.Errorf("the query cannot be read: %v", err)
	}
	return nil
}

func (s *Server) allowedHost(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		} else if strings.Contains(host, ":") {
			return false
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	}
	if auth.IsLoopbackHost(host) {
		return true
	}
	for _, a := range s.opts.AllowHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

func allowedOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Path != "" && u.Path != "/" {
		return false
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// quote quotes a caller's input for an error message, at most
// supervisor.MaxQuoted bytes of it.
func quote(s string) string { return strconv.Quote(supervisor.Clip(s, supervisor.MaxQuoted)) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code wire.ErrorCode, msg string) {
	writeJSON(w, code.Status(), wire.ErrorBody{Error: wire.ErrorDetail{Code: string(code), Message: msg}})
}

// writeSupervisorError maps a supervisor error to its answer. failCode
// names the code for failures that are not the caller's fault.
func (s *Server) writeSupervisorError(w http.ResponseWriter, err error, failCode wire.ErrorCode) {
	code, msg := s.codeOf(v1Fields.Wrap(err), failCode)
	writeError(w, code, msg)
}

// codeOf is the error code of a supervisor error and its message;
// failCode is the code of failures that are not the caller's fault, which
// are logged.
func (s *Server) codeOf(err error, failCode wire.ErrorCode) (wire.ErrorCode, string) {
	for _, m := range supervisorCodes {
		if errors.Is(err, m.err) {
			if m.code == wire.CodeShuttingDown {
				return m.code, "the daemon is shutting down"
			}
			return m.code, err.Error()
		}
	}
	s.log.Error("request failed", "code", failCode, "err", err)
	return failCode, err.Error()
}

// v1Fields are /v1's names of the fields the core checks, where they
// differ from the core's.
var v1Fields = field.Names{field.Env: "envVars", field.AutoStop: "autoStopInterval", field.AutoDelete: "autoDeleteInterval"}

// supervisorCodes maps the supervisor's errors to the API's codes.
var supervisorCodes = []struct {
	err  error
	code wire.ErrorCode
}{
	{supervisor.ErrInvalid, wire.CodeInvalidRequest},
	{supervisor.ErrNotFound, wire.CodeNotFound},
	{supervisor.ErrConflict, wire.CodeNameConflict},
	{supervisor.ErrUnknownSnapshot, wire.CodeUnknownSnapshot},
	{supervisor.ErrProgramNotFound, wire.CodeProgramNotFound},
	{supervisor.ErrImageNotFound, wire.CodeImageNotFound},
	{supervisor.ErrRuntimeUnavailable, wire.CodeRuntimeUnavailable},
	{supervisor.ErrLimitsUnsupported, wire.CodeLimitsUnsupported},
	{supervisor.ErrUnsupportedRuntime, wire.CodeUnsupportedRuntime},
	{supervisor.ErrPortsExhausted, wire.CodePreflightFailed},
	{supervisor.ErrNotRunning, wire.CodeSandboxNotRunning},
	{supervisor.ErrClosed, wire.CodeShuttingDown},
	{supervisor.ErrBusy, wire.CodeBusy},
	{supervisor.ErrTampered, wire.CodePathOutside},
}

// fail answers an error in the shape of the API the request is for:
// Daytona's under /api, the daemon's own elsewhere.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, code wire.ErrorCode, msg string) {
	if isDaytona(r) {
		daytona.WriteError(w, r, code.Status(), msg)
		return
	}
	writeError(w, code, msg)
}

func isDaytona(r *http.Request) bool {
	return r.URL.Path == daytona.Prefix || strings.HasPrefix(r.URL.Path, daytona.Prefix+"/") || strings.HasPrefix(r.URL.Path, daytona.PreviewPath+"/")
}

// decodeJSON reads exactly one JSON value into v, refusing unknown fields.
func decodeJSON(r *http.Request, v any) error { return wire.DecodeJSON(r, v) }

var pid = os.Getpid()
