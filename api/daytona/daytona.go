// Package daytona serves Daytona's own sandbox API at /api, over the same
// supervisor as /v1: an app written for Daytona's SDKs runs against the
// local daemon with DAYTONA_API_URL pointed here. Its shapes, status codes
// and error body are those of Daytona's OpenAPI document (v0.190); what has
// no local meaning gets an honest local value, and what cannot be done
// here is refused in Daytona's error shape, naming what and why.
//
// The package owns the Daytona wire shapes and their decoding; package
// api mounts its routes (the same listener, token and browser guard) and
// maps supervisor errors to statuses.
package daytona

import (
	"cmp"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// Prefix is where the API is served: Daytona's clients are given
// http://HOST:PORT/api as their API URL.
const Prefix = "/api"

// Supervisor is what the API needs of the supervisor; each method's
// contract is the one documented on supervisor.Supervisor.
type Supervisor interface {
	Create(ctx context.Context, req supervisor.CreateRequest) (supervisor.Sandbox, error)
	Get(id string) (supervisor.Sandbox, error)
	ListPage(o supervisor.ListOptions) (page []supervisor.Sandbox, more bool)
	Stop(ctx context.Context, id string, force bool) (supervisor.Sandbox, error)
	Start(ctx context.Context, id string) (supervisor.Sandbox, error)
	Delete(ctx context.Context, id string) error
	RefreshActivity(id string) error
	SetAutoStop(id string, interval time.Duration) (supervisor.Sandbox, error)
	SetAutoDelete(id string, after *time.Duration) (supervisor.Sandbox, error)
	SetExtension(id, key string, value json.RawMessage) (supervisor.Sandbox, error)
	SetPublic(id string, public bool) (supervisor.Sandbox, error)
	ReplaceLabels(id string, labels map[string]string) (supervisor.Sandbox, error)
	Resize(ctx context.Context, id string, l supervisor.Limits) (supervisor.Sandbox, error)
	EnvKeys(id string) ([]string, error)
	PortEndpoint(ctx context.Context, id string, port int) (runtime.Endpoint, error)
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	Snapshots() []snapshot.Snapshot
	CreateVolume(name string) (supervisor.Volume, error)
	Volumes() ([]supervisor.Volume, error)
	Volume(idOrName string) (supervisor.Volume, error)
	DeleteVolume(id string) error
	Toolbox
}

// Options configure the API.
type Options struct {
	Version string    // shown as daemonVersion
	Started time.Time // when the daemon started: what its snapshots show as made
	Root    string    // the supervisor's root: the organization id derives from it
	User    string    // the user sandboxes run as, shown as user
	Machine Machine   // what a sandbox without limits may use
	// Fail answers a supervisor error in Daytona's shape with the status
	// package api maps it to (fail for errors that are not the caller's).
	Fail func(w http.ResponseWriter, r *http.Request, err error, fail wire.ErrorCode)
	// PreviewToken is the token of a sandbox's previews: a secret of the
	// daemon's that ends with the sandbox (a new one of the same name has
	// another).
	PreviewToken func(sb supervisor.Sandbox) string
	// Authorized reports whether a request carries the daemon's own
	// credential (previews of private sandboxes accept it too).
	Authorized func(r *http.Request) bool
	// Credential reports whether a header value holds one of the
	// daemon's credentials (its token, a dashboard session's secret),
	// which a preview never passes to a workload.
	Credential func(v string) bool
	// MaxUpload bounds one upload's body (default fileops.DefaultMaxUpload).
	MaxUpload int64
}

// API is Daytona's API over one supervisor.
type API struct {
	sup     Supervisor
	opts    Options
	org     string
	preview *previewProxy
}

// New builds the API.
func New(sup Supervisor, opts Options) *API {
	a := &API{sup: sup, opts: opts, org: OrganizationID(opts.Root)}
	a.preview = newPreviewProxy(a)
	return a
}

// Route is one operation of the API, for package api to mount.
type Route struct {
	Method, Path string
	Handler      http.HandlerFunc
	Mutates      bool // logged when it succeeds
	// Inside: the operation reaches into the sandbox (its commands,
	// files, sessions), which the host guards more closely.
	Inside bool
	// Upload: the body is a multipart form its handler bounds
	// (Options.MaxUpload), not JSON.
	Upload bool
}

// Routes lists every operation, sorted by path then method. Paths name
// the sandbox {id}: Daytona's sandboxIdOrName and sandboxId are one here.
func (a *API) Routes() []Route {
	out := slices.Concat(a.sandboxRoutes(), a.toolboxRoutes(), a.snapshotRoutes(), a.volumeRoutes(), refusedExcept("/api/volumes", "this volume operation", "Daytona's API has no such route", a.volumeRoutes()))
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Method, b.Method))
	})
	return out
}

func (a *API) sandboxRoutes() []Route {
	return []Route{
		{"GET", "/api/sandbox", a.list, false, false, false},
		{"POST", "/api/sandbox", a.create, true, false, false},
		{"DELETE", "/api/sandbox/{id}", a.delete, true, false, false},
		{"GET", "/api/sandbox/{id}", a.get, false, false, false},
		{"POST", "/api/sandbox/{id}/archive", a.archive, true, false, false},
		{"POST", "/api/sandbox/{id}/autoarchive/{interval}", a.autoArchive, true, false, false},
		{"POST", "/api/sandbox/{id}/autodelete/{interval}", a.autoDelete, true, false, false},
		{"POST", "/api/sandbox/{id}/autostop/{interval}", a.autoStop, true, false, false},
		{"POST", "/api/sandbox/{id}/backup", unsupported("backups", "there is no backup storage here"), false, false, false},
		{"POST", "/api/sandbox/{id}/fork", unsupported("forks", "a sandbox cannot be copied while it runs here"), false, false, false},
		{"PUT", "/api/sandbox/{id}/labels", a.replaceLabels, true, false, false},
		{"POST", "/api/sandbox/{id}/last-activity", a.lastActivity, false, false, false},
		{"POST", "/api/sandbox/{id}/network-settings", unsupported("network settings", "this daemon cannot cut or filter a sandbox's network"), false, false, false},
		{"POST", "/api/sandbox/{id}/pause", unsupported("pause", "sandboxes stop and start again here (their files kept); they do not pause"), false, false, false},
		{"GET", "/api/sandbox/{id}/ports/{port}/preview-url", a.previewURL, false, false, false},
		{"GET", "/api/sandbox/{id}/ports/{port}/signed-preview-url", unsupported("signed preview URLs", "previews are reached with the token of preview-url"), false, false, false},
		{"POST", "/api/sandbox/{id}/public/{isPublic}", a.setPublic, true, false, false},
		{"POST", "/api/sandbox/{id}/recover", a.recover, true, false, false},
		{"POST", "/api/sandbox/{id}/resize", a.resize, true, false, false},
		{"POST", "/api/sandbox/{id}/snapshot", unsupported("snapshots of a sandbox", "snapshots are configured in the daemon's config file"), false, false, false},
		{"GET", "/api/sandbox/{id}/ssh-access", unsupported("ssh access", "there is no ssh gateway here; the sandbox runs on this machine"), false, false, false},
		{"POST", "/api/sandbox/{id}/ssh-access", unsupported("ssh access", "there is no ssh gateway here; the sandbox runs on this machine"), false, false, false},
		{"POST", "/api/sandbox/{id}/start", a.start, true, false, false},
		{"POST", "/api/sandbox/{id}/stop", a.stop, true, false, false},
		{"GET", "/api/sandbox/{id}/toolbox-proxy-url", a.toolboxProxyURL, false, false, false},
	}
}

// Error is Daytona's error body (NestJS's): its SDKs read message.
type Error struct {
	StatusCode int    `json:"statusCode"`
	Error      string `json:"error"`
	Message    string `json:"message"`
	Path       string `json:"path"`
	Timestamp  string `json:"timestamp"`
}

// WriteError answers an error in Daytona's shape.
func WriteError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, Error{StatusCode: status, Error: http.StatusText(status), Message: msg,
		Path: r.URL.Path, Timestamp: timeText(time.Now())})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// unsupported answers a Daytona feature this daemon does not have.
func unsupported(what, why string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, http.StatusBadRequest, what+": not supported by this daemon ("+why+")")
	}
}

// ToolboxPath is where the toolbox is served; a sandbox's toolbox is
// under ToolboxPath/{id}.
const ToolboxPath = Prefix + "/toolbox"

// toolboxBase is the toolbox proxy URL given to clients: this daemon, as
// the client reached it.
func toolboxBase(r *http.Request) string { return "http://" + r.Host + ToolboxPath }
