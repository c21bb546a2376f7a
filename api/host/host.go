// Package host is the daemon's HTTP host: the listener and its bound on
// connections, the guard every request passes (loopback hosts, browser
// origins, the query's bounds, the credential, the body's type and
// bounds), dispatch by route with its metrics and its log of changes, and
// the mapping of the supervisor's errors to the API's codes. It serves
// faces it is given (the daemon's /v1, Daytona's /api, the dashboard),
// each a table of routes with its own error shape, and imports none of
// them: a face declares what the host needs of each route.
package host

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agent-control-plane/agent-control-plane/api/signin"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Registry: the HTTP metrics are registered there and it is served
	// at GET /metrics; nil: neither.
	Registry *prometheus.Registry
	// AllowHosts are host names accepted besides loopback ones (the
	// listen host when the daemon is exposed on purpose).
	AllowHosts []string
	// Token is the bearer token every route but the open ones (and
	// /metrics, unless MetricsAuth) requires. Required.
	Token       string
	MetricsAuth bool
	// OnToken is told the token at start and at each rotation (the
	// supervisor redacts it from what workloads print).
	OnToken func(token string)
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
	// SignIns keeps the dashboard's browser sign-ins across restarts
	// (only hashes of their secrets); nil: in memory only.
	SignIns signin.Disk
	// SignInTTL is how long a dashboard sign-in lasts; default 24 h.
	SignInTTL time.Duration
	// Now is the sign-ins' clock; default time.Now (tests move it).
	Now func() time.Time
	// Confined reports whether sandbox id's workload is kept from the
	// daemon's own files: a dashboard session may call an Inside route
	// only for such a sandbox.
	Confined func(id string) (bool, error)
}

// Server serves faces.
type Server struct {
	opts     Options
	log      *slog.Logger
	token    atomic.Pointer[string]
	signins  *signin.Store
	metrics  *httpMetrics
	fallback Face // answers paths no face claims
	faces    []Face
	handler  http.Handler
}

// New returns a Server for faces; the first is the fallback, whose error
// shape answers paths no face claims.
func New(opts Options, faces ...Face) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 30 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 1024
	}
	if len(faces) == 0 {
		return nil, fmt.Errorf("host: no face to serve")
	}
	s := &Server{opts: opts, log: opts.Logger, fallback: faces[0], faces: faces}
	signins, err := signin.Open(opts.Token, signin.Options{Disk: opts.SignIns, TTL: opts.SignInTTL, Now: opts.Now})
	if err != nil {
		s.log.Warn("dashboard sessions could not be read back; browsers sign in again", "err", err)
	}
	s.signins = signins
	if err := s.SetToken(opts.Token); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	top := http.NewServeMux()
	if opts.Registry != nil {
		m, err := newHTTPMetrics(opts.Registry)
		if err != nil {
			return nil, err
		}
		s.metrics = m
		access := Open
		if opts.MetricsAuth {
			access = Member
		}
		metrics := promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{Registry: opts.Registry})
		faces[0].Routes = append(faces[0].Routes, Route{Method: "GET", Path: "/metrics", Handler: metrics.ServeHTTP, Access: access, Quiet: true})
	}
	for _, f := range faces {
		for path, methods := range byPath(f.Routes) {
			mux.Handle(path, s.dispatch(f, path, methods))
		}
		for pattern, h := range f.Raw {
			top.Handle(pattern, h)
		}
	}
	mux.Handle("/", s.dispatch(Face{}, "", nil)) // no route: 404 in the shape of the face the path is under
	top.Handle("/", mux)
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
	if s.opts.OnToken != nil {
		s.opts.OnToken(token)
	}
	if err := s.signins.Rotate(token); err != nil {
		s.log.Warn("dashboard sessions: the file could not be rewritten after the rotation", "err", err)
	}
	return nil
}

// Token is the bearer token in force.
func (s *Server) Token() string { return *s.token.Load() }

// SignIns are the dashboard's browser sign-ins.
func (s *Server) SignIns() *signin.Store { return s.signins }

// HoldsCredential reports whether v holds the daemon's token or a
// dashboard session's secret (which all begin signin.SecretPrefix).
func (s *Server) HoldsCredential(v string) bool {
	return strings.Contains(v, s.Token()) || strings.Contains(v, signin.SecretPrefix)
}

// ServeHTTP serves the faces.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// faceOf is the face whose paths hold path, or the fallback.
func (s *Server) faceOf(path string) Face {
	for _, f := range s.faces {
		for _, p := range f.Prefixes {
			if path == p || strings.HasPrefix(path, p+"/") {
				return f
			}
		}
	}
	return s.fallback
}

// Fail answers an error in the shape of the face r's path is under.
func (s *Server) Fail(w http.ResponseWriter, r *http.Request, code wire.ErrorCode, msg string) {
	s.faceOf(r.URL.Path).Fail(w, r, code, msg)
}

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
