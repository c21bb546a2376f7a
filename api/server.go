// Package api is the daemon's own face: its /v1 HTTP API, its SSE event
// feed, the dashboard's page and sign-ins, and the metrics of its
// sandboxes, over a Supervisor interface it declares itself. New serves
// it through package host (listener, guard, dispatch, error mapping)
// beside Daytona's face, package daytona, when it is given one. The
// supervisor owns every decision about sandboxes.
package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/host"
	"github.com/agent-control-plane/agent-control-plane/api/signin"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
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
	LogSizes(id string) ([]supervisor.LogSize, error)
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
	RunStream(ctx context.Context, id string, spec supervisor.RunSpec, started func(), emit func(stderr bool, text string) error) (runtime.Exit, error)
	Files(id string) (runtime.Files, error)
	StoredFiles(id string) (runtime.Files, error)
	CreateSession(id, sid string) (*shell.Session, error)
	DeleteSession(id, sid string) error
	OpenTerminal(id string, spec terminal.Spec, argv []string) (*terminal.Terminal, error)
	Terminal(id, tid string) (*terminal.Terminal, error)
	TerminalInput(id, tid string, p []byte) error
	ResizeTerminal(id, tid string, cols, rows int) (terminal.Info, error)
	CloseTerminal(id, tid string) error
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
	// The host's: see host.Options.
	AllowHosts  []string
	Token       string // required
	MetricsAuth bool
	BodyTimeout time.Duration
	MaxConns    int
	// Cgroups is what /v1/info says of native sandboxes' containment;
	// nil says nothing.
	Cgroups *wire.Cgroups
	// Isolation is what /v1/info says of native sandboxes' isolation:
	// "namespaces" or "off".
	Isolation string
	// ReadyPath and StartupTimeout are shown in /v1/info, so clients can
	// say what they wait for, and for how long.
	ReadyPath      string
	StartupTimeout time.Duration
	StopGrace      time.Duration // shown in /v1/info
	// The dashboard's sign-ins, kept by the host: see host.Options (the
	// daemon gives its supervisor as SignIns: the file is in the root).
	SignIns   signin.Disk
	SignInTTL time.Duration
	Now       func() time.Time
	// MaxUpload bounds one toolbox upload (default fileops.DefaultMaxUpload).
	MaxUpload int64
}

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = wire.MaxBodyBytes

// Server is the daemon's HTTP API over one Supervisor: the host
// (package host) serving /v1 and the dashboard (this package's faces) and,
// given Options.Daytona, Daytona's /api.
type Server struct {
	sup       Supervisor
	opts      Options
	log       *slog.Logger
	startedAt time.Time
	host      *host.Server
	encoded   encodedEvents
}

// New builds the server and registers its metrics.
func New(sup Supervisor, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	s := &Server{sup: sup, opts: opts, log: opts.Logger, startedAt: time.Now()}
	faces := []host.Face{s.v1Face()}
	var dt *daytona.API
	if opts.Daytona != nil {
		dt = s.newDaytona(opts.Daytona)
		faces = append(faces, s.daytonaFace(dt))
	}
	if opts.Registry != nil {
		if err := opts.Registry.Register(newCollector(sup)); err != nil {
			return nil, err
		}
		if err := opts.Registry.Register(newBuildInfo(opts.Version)); err != nil {
			return nil, err
		}
	}
	h, err := host.New(host.Options{
		Logger: opts.Logger, Registry: opts.Registry, AllowHosts: opts.AllowHosts,
		Token: opts.Token, MetricsAuth: opts.MetricsAuth, OnToken: func(t string) { sup.SetCredentials(t) },
		BodyTimeout: opts.BodyTimeout, MaxConns: opts.MaxConns,
		SignIns: opts.SignIns, SignInTTL: opts.SignInTTL, Now: opts.Now,
		Confined: sup.Confined,
	}, faces...)
	if err != nil {
		return nil, err
	}
	s.host = h
	return s, nil
}

// v1Face is /v1 and the dashboard's page and files, in the daemon's own
// error shape; it answers every path no other face claims.
func (s *Server) v1Face() host.Face {
	var out []host.Route
	for _, rt := range routes {
		h := rt.handler
		out = append(out, host.Route{Method: rt.method, Path: rt.path, Handler: func(w http.ResponseWriter, r *http.Request) { h(s, w, r) },
			Mutates: rt.mutates, Access: rt.access, Body: rt.body})
	}
	out = append(out, host.Route{Method: "GET", Path: "/{$}", Handler: s.home, Access: host.Open, Quiet: true})
	for _, f := range uiAssets() {
		out = append(out, host.Route{Method: "GET", Path: "/ui/" + f, Handler: uiAsset, Access: host.Open, Quiet: true})
	}
	return host.Face{Prefixes: []string{"/v1"}, Routes: out,
		Fail: func(w http.ResponseWriter, _ *http.Request, code wire.ErrorCode, msg string) {
			writeError(w, code, msg)
		}}
}

// SetToken replaces the bearer token (a rotation); requests that carry the
// old one, and every dashboard session, are refused from now on.
func (s *Server) SetToken(token string) error { return s.host.SetToken(token) }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.host.ServeHTTP(w, r) }

// Run serves on ln until ctx ends, then shuts down gracefully (see
// host.Server.Run).
func (s *Server) Run(ctx context.Context, ln net.Listener) error { return s.host.Run(ctx, ln) }

// route is one /v1 endpoint. The table in routes.go is sorted by a test.
type route struct {
	method  string
	path    string
	handler func(*Server, http.ResponseWriter, *http.Request)
	mutates bool // logged when it succeeds
	access  host.Access
	body    host.Body
}

// Who may call a route (host.Access), and the body it takes (host.Body),
// as the table in routes.go writes them.
const (
	member    = host.Member
	open      = host.Open
	tokenOnly = host.TokenOnly
	inside    = host.Inside

	jsonBody = host.JSON
	fileBody = host.Octet // a file's bytes, bounded by its handler
	tarBody  = host.Tar   // a tar stream, bounded by its handler
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

func quote(s string) string { return host.Quote(s) }

func writeJSON(w http.ResponseWriter, code int, v any) { host.WriteJSON(w, code, v) }

func writeError(w http.ResponseWriter, code wire.ErrorCode, msg string) {
	host.WriteError(w, code, msg)
}

// writeSupervisorError maps a supervisor error to its answer. failCode
// names the code for failures that are not the caller's fault.
func (s *Server) writeSupervisorError(w http.ResponseWriter, err error, failCode wire.ErrorCode) {
	code, msg := s.host.CodeOf(v1Fields.Wrap(err), failCode)
	writeError(w, code, msg)
}

// v1Fields are /v1's names of the fields the core checks, where they
// differ from the core's.
var v1Fields = field.Names{field.Env: "envVars", field.AutoStop: "autoStopInterval", field.AutoDelete: "autoDeleteInterval"}

// decodeJSON reads exactly one JSON value into v, refusing unknown fields.
func decodeJSON(r *http.Request, v any) error { return wire.DecodeJSON(r, v) }

var pid = os.Getpid()
