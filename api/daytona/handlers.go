package daytona

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/redact"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// createBody is Daytona's CreateSandbox.
type createBody struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels,omitempty"`
	Public              bool              `json:"public,omitempty"`
	CPU                 *float64          `json:"cpu,omitempty"`
	Memory              *float64          `json:"memory,omitempty"`
	AutoStopInterval    *float64          `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *float64          `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *float64          `json:"autoDeleteInterval,omitempty"`
	wire.DaytonaFields
}

// fail answers a supervisor error.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error, code wire.ErrorCode) {
	a.opts.Fail(w, r, fields.Wrap(err), code)
}

// fields are Daytona's names of the fields the core checks, where they
// differ from the core's.
var fields = field.Names{field.AutoStop: "autoStopInterval", field.AutoDelete: "autoDeleteInterval"}

func badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	WriteError(w, r, http.StatusBadRequest, msg)
}

// minutesParam reads an interval in minutes; negative only where allowed.
func minutesParam(field string, m float64, negative bool) (time.Duration, error) {
	if math.IsNaN(m) || math.IsInf(m, 0) || m > 1e8 || m < 0 && !negative {
		return 0, fmt.Errorf("%s must be a number of minutes between 0 and 1e8", field)
	}
	return time.Duration(m * float64(time.Minute)), nil
}

// newID is a sandbox id as Daytona makes them: a random UUID. A sandbox
// created without a name is named by it.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var b createBody
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if err := b.Check(); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if len(b.Env) > 0 && !a.opts.Authorized(r) {
		WriteError(w, r, http.StatusForbidden, wire.SessionEnvRefused)
		return
	}
	req := supervisor.CreateRequest{
		Name: b.Name, Snapshot: b.Snapshot, Env: b.Env, Labels: b.Labels, Public: b.Public,
		Network: runtime.Network{BlockAll: b.NetworkBlockAll, AllowList: b.AllowList()},
	}
	for _, m := range b.Volumes {
		req.Volumes = append(req.Volumes, supervisor.VolumeMount(m))
	}
	var err error
	if req.Limits, err = toLimits(b.CPU, b.Memory); err != nil {
		a.fail(w, r, err, wire.CodeInvalidRequest)
		return
	}
	if req.Name == "" {
		req.Name = newID()
	}
	var autoArchive *time.Duration
	for _, iv := range []struct {
		field string
		m     *float64
		dst   **time.Duration
	}{
		{"autoStopInterval", b.AutoStopInterval, &req.AutoStopInterval},
		{"autoArchiveInterval", b.AutoArchiveInterval, &autoArchive},
		{"autoDeleteInterval", b.AutoDeleteInterval, &req.AutoDeleteInterval},
	} {
		if iv.m == nil {
			continue
		}
		negative := iv.field == "autoDeleteInterval" // negative: never
		d, err := minutesParam(iv.field, *iv.m, negative)
		if err != nil {
			badRequest(w, r, err.Error())
			return
		}
		*iv.dst = &d
	}
	if autoArchive != nil {
		WithAutoArchive(&req, *autoArchive)
	}
	sb, err := a.sup.Create(r.Context(), req)
	if err != nil {
		a.fail(w, r, err, wire.CodeCreateFailed)
		return
	}
	a.writeSandbox(w, r, sb)
}

// writeSandbox answers one sandbox in full: the names of its variables
// too, each value shown as redact.Redacted (as /v1 shows their names
// alone: a value is never read back, whatever its name or shape).
func (a *API) writeSandbox(w http.ResponseWriter, r *http.Request, sb supervisor.Sandbox) {
	out := Sandbox{SandboxListItem: a.item(sb, toolboxBase(r)), Env: map[string]string{},
		NetworkBlockAll: sb.Network.BlockAll, NetworkAllowList: strings.Join(sb.Network.AllowList, ",")}
	if sb.State != supervisor.Destroyed {
		keys, err := a.sup.EnvKeys(sb.ID)
		if err != nil && !errors.Is(err, supervisor.ErrNotFound) {
			a.fail(w, r, err, wire.CodeInternal)
			return
		}
		for _, k := range keys {
			out.Env[k] = redact.Redacted
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sup.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

func (a *API) start(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sup.Start(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeStartFailed)
		return
	}
	a.writeSandbox(w, r, sb)
}

// archive stops the sandbox (if it runs) and marks it archived: its files
// stay where they are, which is all an archive keeps here, and a start
// brings it back as from a stop.
func (a *API) archive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := a.sup.Get(id)
	if err == nil && sb.State.Live() {
		sb, err = a.sup.Stop(r.Context(), id, false)
	}
	if err == nil && sb.State != supervisor.Stopped {
		err = fmt.Errorf("%w: %s is %s; only a stopped sandbox is archived", supervisor.ErrNotRunning, id, sb.State)
	}
	if err != nil {
		a.fail(w, r, err, wire.CodeStopFailed)
		return
	}
	x := extensionOf(sb)
	x.ArchivedStop = sb.StoppedAt
	if sb, err = a.sup.SetExtension(id, extensionKey, x.raw()); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

// recover is Daytona's way out of error: here, a start (skipStart=true
// leaves the sandbox stopped, which it already is).
func (a *API) recover(w http.ResponseWriter, r *http.Request) {
	skip, ok := boolQuery(w, r, "skipStart")
	if !ok {
		return
	}
	if skip {
		a.get(w, r)
		return
	}
	a.start(w, r)
}

func (a *API) stop(w http.ResponseWriter, r *http.Request) {
	force, ok := boolQuery(w, r, "force")
	if !ok {
		return
	}
	sb, err := a.sup.Stop(r.Context(), r.PathValue("id"), force)
	if err != nil {
		a.fail(w, r, err, wire.CodeStopFailed)
		return
	}
	a.writeSandbox(w, r, sb)
}

// delete answers the sandbox as it was, destroyed.
func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sup.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeDeleteFailed)
		return
	}
	if err := a.sup.Delete(r.Context(), sb.ID); err != nil {
		a.fail(w, r, err, wire.CodeDeleteFailed)
		return
	}
	sb.State, sb.UpdatedAt = supervisor.Destroyed, time.Now()
	a.writeSandbox(w, r, sb)
}

func (a *API) replaceLabels(w http.ResponseWriter, r *http.Request) {
	var b SandboxLabels
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.Labels == nil {
		badRequest(w, r, "labels is required")
		return
	}
	sb, err := a.sup.ReplaceLabels(r.PathValue("id"), b.Labels)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, SandboxLabels{Labels: sb.Labels})
}

// interval reads the {interval} of a path in minutes.
func interval(w http.ResponseWriter, r *http.Request, negative bool) (time.Duration, bool) {
	m, err := strconv.ParseFloat(r.PathValue("interval"), 64)
	if err != nil {
		badRequest(w, r, "interval must be a number of minutes")
		return 0, false
	}
	d, err := minutesParam("interval", m, negative)
	if err != nil {
		badRequest(w, r, err.Error())
		return 0, false
	}
	return d, true
}

func (a *API) autoStop(w http.ResponseWriter, r *http.Request) {
	d, ok := interval(w, r, false)
	if !ok {
		return
	}
	sb, err := a.sup.SetAutoStop(r.PathValue("id"), d)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

func (a *API) autoArchive(w http.ResponseWriter, r *http.Request) {
	d, ok := interval(w, r, false)
	if !ok {
		return
	}
	sb, err := a.sup.SetExtension(r.PathValue("id"), extensionKey, extension{AutoArchiveMs: d.Milliseconds()}.raw())
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

// autoDelete: a negative interval never deletes, 0 deletes right after
// the stop.
func (a *API) autoDelete(w http.ResponseWriter, r *http.Request) {
	d, ok := interval(w, r, true)
	if !ok {
		return
	}
	var after *time.Duration
	if d >= 0 {
		after = &d
	}
	sb, err := a.sup.SetAutoDelete(r.PathValue("id"), after)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

func (a *API) setPublic(w http.ResponseWriter, r *http.Request) {
	public, err := strconv.ParseBool(r.PathValue("isPublic"))
	if err != nil {
		badRequest(w, r, "isPublic must be true or false")
		return
	}
	sb, err := a.sup.SetPublic(r.PathValue("id"), public)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	a.writeSandbox(w, r, sb)
}

// lastActivity is the keep-alive: 201, no body, as Daytona answers.
func (a *API) lastActivity(w http.ResponseWriter, r *http.Request) {
	if err := a.sup.RefreshActivity(r.PathValue("id")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// resize is Daytona's ResizeSandbox: cpu and memory (GiB) are limits; a
// disk is refused, as at create.
func (a *API) resize(w http.ResponseWriter, r *http.Request) {
	var b struct {
		CPU    *float64 `json:"cpu,omitempty"`
		Memory *float64 `json:"memory,omitempty"`
		Disk   *float64 `json:"disk,omitempty"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if err := (wire.DaytonaFields{Disk: b.Disk}).Check(); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	l, err := toLimits(b.CPU, b.Memory)
	if err != nil {
		a.fail(w, r, err, wire.CodeResizeFailed)
		return
	}
	sb, err := a.sup.Resize(r.Context(), r.PathValue("id"), l)
	if err != nil {
		a.fail(w, r, err, wire.CodeResizeFailed)
		return
	}
	a.writeSandbox(w, r, sb)
}

func (a *API) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	if _, err := a.sup.Get(r.PathValue("id")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, ToolboxProxyURL{URL: toolboxBase(r)})
}

// boolQuery reads an optional boolean query parameter; false when absent.
func boolQuery(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		badRequest(w, r, name+" must be true or false")
		return false, false
	}
	return b, true
}
