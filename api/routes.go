// This file is long because it holds /v1's route table beside the
// handlers of its sandbox routes, which share the decoding declared here.

package api

import (
	"bufio"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/host"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// routes is the whole API, sorted by path then method (a test keeps it so).
var routes = []route{
	{"POST", "/v1/dashboard/links", (*Server).newLink, true, tokenOnly, jsonBody},
	{"DELETE", "/v1/dashboard/sessions", (*Server).revokeSessions, true, member, jsonBody},
	{"GET", "/v1/dashboard/sessions", (*Server).listSessions, false, member, jsonBody},
	{"POST", "/v1/dashboard/sessions", (*Server).redeem, true, open, jsonBody},
	{"DELETE", "/v1/dashboard/sessions/{id}", (*Server).revokeSession, true, member, jsonBody},
	{"GET", "/v1/events", (*Server).events, false, member, jsonBody},
	{"GET", "/v1/info", (*Server).info, false, open, jsonBody},
	{"GET", "/v1/openapi.yaml", (*Server).openapi, false, member, jsonBody},
	{"GET", "/v1/sandboxes", (*Server).list, false, member, jsonBody},
	{"POST", "/v1/sandboxes", (*Server).create, true, member, jsonBody},
	{"DELETE", "/v1/sandboxes/{id}", (*Server).delete, true, member, jsonBody},
	{"GET", "/v1/sandboxes/{id}", (*Server).get, false, member, jsonBody},
	{"GET", "/v1/sandboxes/{id}/archive", (*Server).getArchive, false, inside, jsonBody},
	{"PUT", "/v1/sandboxes/{id}/archive", (*Server).putArchive, true, inside, tarBody},
	{"POST", "/v1/sandboxes/{id}/autostop", (*Server).autostop, true, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/autostop/{interval}", (*Server).autostop, true, member, jsonBody},
	{"GET", "/v1/sandboxes/{id}/entrypoint-logs", (*Server).logs, false, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/exec", (*Server).exec, true, inside, jsonBody},
	{"GET", "/v1/sandboxes/{id}/files", (*Server).listFiles, false, inside, jsonBody},
	{"GET", "/v1/sandboxes/{id}/files/content", (*Server).readFile, false, inside, jsonBody},
	{"PUT", "/v1/sandboxes/{id}/files/content", (*Server).writeFile, true, inside, fileBody},
	{"GET", "/v1/sandboxes/{id}/files/stat", (*Server).statFile, false, inside, jsonBody},
	{"GET", "/v1/sandboxes/{id}/preview-url", (*Server).previewURL, false, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/refresh-activity", (*Server).refreshActivity, false, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/resize", (*Server).resize, true, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/sessions", (*Server).createSession, true, inside, jsonBody},
	{"DELETE", "/v1/sandboxes/{id}/sessions/{session}", (*Server).deleteSession, true, inside, jsonBody},
	{"POST", "/v1/sandboxes/{id}/sessions/{session}/exec", (*Server).sessionExec, true, inside, jsonBody},
	{"POST", "/v1/sandboxes/{id}/start", (*Server).start, true, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/stop", (*Server).stop, true, member, jsonBody},
	{"POST", "/v1/sandboxes/{id}/terminals", (*Server).openTerminal, true, inside, jsonBody},
	{"DELETE", "/v1/sandboxes/{id}/terminals/{terminal}", (*Server).closeTerminal, true, inside, jsonBody},
	{"GET", "/v1/sandboxes/{id}/terminals/{terminal}/attach", (*Server).attachTerminal, false, inside, jsonBody},
	{"GET", "/v1/snapshots", (*Server).snapshots, false, member, jsonBody},
}

// OpenAPI is the /v1 contract, api/openapi.yaml, served at
// GET /v1/openapi.yaml so that clients in other languages can generate their
// types from the daemon they talk to.
//
//go:embed openapi.yaml
var OpenAPI []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(OpenAPI)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	lo, hi := s.sup.PortRange()
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	var down map[string]string
	if m := s.sup.Unavailable(ctx); len(m) > 0 {
		down = m
	}
	writeJSON(w, http.StatusOK, wire.Info{
		Name: wire.Name, Version: s.opts.Version, APIVersion: wire.APIVersion, PID: pid,
		StartedAt: wire.Time{Time: s.startedAt}, Root: s.sup.Root(), PortRange: fmt.Sprintf("%d-%d", lo, hi),
		Runtimes: s.sup.Runtimes(), Unavailable: down, Cgroups: s.opts.Cgroups, Isolation: cmp.Or(s.opts.Isolation, runtime.IsolationOff),
		ReadyPath: s.opts.ReadyPath, StartupTimeoutMs: s.opts.StartupTimeout.Milliseconds(),
		StopGraceMs: s.opts.StopGrace.Milliseconds(),
	})
}

// snapshots lists what creates may run. A snapshot's command and env
// values are not shown: they may carry secrets.
func (s *Server) snapshots(w http.ResponseWriter, r *http.Request) {
	list := wire.SnapshotList{Items: []wire.Snapshot{}}
	for _, p := range s.sup.Snapshots() {
		ws := wire.Snapshot{
			Name: p.Name, Runtime: p.Runtime, Image: p.Image, ReadyPath: p.ReadyPath,
			StartupTimeoutMs: p.StartupTimeout.Milliseconds(), StopGraceMs: p.StopGrace.Milliseconds(),
			Default: p.Name == snapshot.Default,
		}
		for k := range p.Env {
			ws.EnvKeys = append(ws.EnvKeys, k)
		}
		slices.Sort(ws.EnvKeys)
		list.Items = append(list.Items, ws)
	}
	writeJSON(w, http.StatusOK, list)
}

// labelFilter reads label filters into a filter: label=k=v (repeatable;
// the form generated clients send), label.k=v, and Daytona's
// labels={"k":"v"}. All must match.
func labelFilter(q map[string][]string) (supervisor.Filter, error) {
	f := supervisor.Filter{}
	add := func(k, v string) error {
		if old, ok := f[k]; ok && old != v {
			return fmt.Errorf("label %s is filtered on twice, with different values", quote(k))
		}
		f[k] = v
		return nil
	}
	for key, vals := range q {
		switch {
		case key == "label":
			for _, kv := range vals {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("label=%s: want label=KEY=VALUE", quote(kv))
				}
				if err := add(k, v); err != nil {
					return nil, err
				}
			}
		case strings.HasPrefix(key, "label."):
			if len(vals) != 1 {
				return nil, fmt.Errorf("%s given %d times", quote(key), len(vals))
			}
			if err := add(strings.TrimPrefix(key, "label."), vals[0]); err != nil {
				return nil, err
			}
		case key == "labels":
			for _, v := range vals {
				var m map[string]string
				if err := json.Unmarshal([]byte(v), &m); err != nil {
					return nil, errors.New(`labels must be a JSON object of strings, e.g. {"origin":"cli"}`)
				}
				for k, v := range m {
					if err := add(k, v); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if err := supervisor.ValidateLabels(f); err != nil {
		return nil, err
	}
	return f, nil
}

// MaxListLimit bounds a page of the list.
const MaxListLimit = 1000

// listPageSize is how many sandboxes a full list answer holds in memory at
// once while it streams (each page is a pass over the registry, so pages
// are large: a registry of a thousand is one pass).
const listPageSize = 1000

// listOptions reads the list's query: label filters, states=a,b (also
// repeated), limit, cursor and usage.
// listQuery is what a list asks for: a page, and whether usage is shown.
type listQuery struct {
	supervisor.ListOptions
	Usage bool
}

func listOptions(q map[string][]string) (listQuery, error) {
	var lq listQuery
	o, err := pageOptions(q)
	if err != nil {
		return lq, err
	}
	lq.ListOptions = o
	if v := firstOf(q, "usage"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return lq, errors.New("usage must be true or false")
		}
		lq.Usage = b
	}
	return lq, nil
}

func pageOptions(q map[string][]string) (supervisor.ListOptions, error) {
	f, err := labelFilter(q)
	if err != nil {
		return supervisor.ListOptions{}, err
	}
	o := supervisor.ListOptions{Labels: f}
	for _, v := range q["states"] {
		for _, st := range strings.Split(v, ",") {
			switch st := supervisor.State(strings.TrimSpace(st)); st {
			case supervisor.Starting, supervisor.Started, supervisor.Stopped:
				if !slices.Contains(o.States, st) {
					o.States = append(o.States, st)
				}
			default:
				return o, fmt.Errorf("states: %s is not a state; want starting, started or stopped", quote(string(st)))
			}
		}
	}
	if v := firstOf(q, "limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return o, fmt.Errorf("limit must be a whole number from 1 to %d", MaxListLimit)
		}
		o.Limit = n
	}
	if v := firstOf(q, "cursor"); v != "" {
		c, err := supervisor.ParseCursor(v)
		if err != nil {
			return o, err
		}
		o.After = &c
	}
	return o, nil
}

func firstOf(q map[string][]string, k string) string {
	if vs := q[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// list answers GET /v1/sandboxes. With a limit it is one page and the
// cursor of the next. Without, it is the whole list, written in pages of
// listPageSize as it goes: memory per reader does not grow with the
// registry, however many readers and however slow.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	lq, err := listOptions(r.URL.Query())
	if err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	o := lq.ListOptions
	page := func() ([]supervisor.Sandbox, bool) {
		page, more := s.sup.ListPage(o)
		if lq.Usage {
			s.sup.Meter(r.Context(), page)
		}
		return page, more
	}
	if o.Limit > 0 {
		page, more := page()
		out := wire.ListResponse{Sandboxes: make([]wire.SandboxInfo, 0, len(page))}
		for _, sb := range page {
			out.Sandboxes = append(out.Sandboxes, ToInfo(sb))
		}
		if more {
			out.NextCursor = supervisor.CursorOf(page[len(page)-1]).String()
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"sandboxes":[`)
	enc := json.NewEncoder(bw) // its buffers are pooled: no garbage per sandbox
	o.Limit = listPageSize
	first := true
	for {
		page, more := page()
		for _, sb := range page {
			if !first {
				bw.WriteByte(',')
			}
			first = false
			if err := enc.Encode(ToInfo(sb)); err != nil {
				return // the client went away
			}
		}
		if !more {
			break
		}
		c := supervisor.CursorOf(page[len(page)-1])
		o.After = &c
	}
	bw.WriteString("]}\n")
	bw.Flush()
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sup.Get(r.PathValue("id"))
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	one := []supervisor.Sandbox{sb}
	s.sup.Meter(r.Context(), one)
	info := ToInfo(one[0])
	if info.EnvKeys, err = s.sup.EnvKeys(sb.ID); err != nil && !errors.Is(err, supervisor.ErrNotFound) {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	if sizes, err := s.sup.LogSizes(sb.ID); err == nil {
		for _, l := range sizes {
			info.Logs = append(info.Logs, wire.LogSize{Stream: l.Stream, LiveBytes: l.Live, RotatedBytes: l.Rotated, WrittenBytes: l.Written})
		}
	} else if !errors.Is(err, supervisor.ErrNotFound) {
		s.log.Warn("read log sizes", "sandbox", sb.ID, "err", err)
	}
	writeJSON(w, http.StatusOK, info)
}

// minutesToDuration converts a wire interval in minutes.
func minutesToDuration(field string, m float64) (time.Duration, error) {
	if math.IsNaN(m) || math.IsInf(m, 0) || m < 0 || m > 1e8 {
		return 0, fmt.Errorf("%s must be between 0 and 1e8 minutes", field)
	}
	return time.Duration(m * float64(time.Minute)), nil
}

// DecodeCreate turns a create body into a supervisor request. It enforces
// the wire rules (JSON shape, interval ranges); the supervisor validates
// names, labels and env.
func DecodeCreate(r *http.Request) (supervisor.CreateRequest, error) {
	var body struct {
		wire.CreateSandboxRequest
		wire.DaytonaFields
		AutoArchiveInterval *float64 `json:"autoArchiveInterval,omitempty"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return supervisor.CreateRequest{}, err
	}
	if err := body.Check(); err != nil {
		return supervisor.CreateRequest{}, err
	}
	req, err := createRequest(body.CreateSandboxRequest)
	req.Network = runtime.Network{BlockAll: body.NetworkBlockAll, AllowList: body.AllowList()}
	for _, m := range body.Volumes {
		req.Volumes = append(req.Volumes, supervisor.VolumeMount(m))
	}
	if err == nil && body.AutoArchiveInterval != nil {
		var d time.Duration
		d, err = minutesToDuration("autoArchiveInterval", *body.AutoArchiveInterval)
		daytona.WithAutoArchive(&req, d)
	}
	return req, err
}

func createRequest(b wire.CreateSandboxRequest) (supervisor.CreateRequest, error) {
	req := supervisor.CreateRequest{
		Name: b.Name, Runtime: b.Runtime, Snapshot: b.Snapshot,
		Env: b.EnvVars, Labels: b.Labels, Public: b.Public,
	}
	if b.Name == "" {
		return req, errors.New("name is required")
	}
	var err error
	if req.Limits, err = toLimits(b.Limits); err != nil {
		return req, err
	}
	if b.AutoStopInterval != nil {
		d, err := minutesToDuration("autoStopInterval", *b.AutoStopInterval)
		if err != nil {
			return req, err
		}
		req.AutoStopInterval = &d
	}
	if b.AutoDeleteInterval != nil {
		m := *b.AutoDeleteInterval
		if m != -1 {
			d, err := minutesToDuration("autoDeleteInterval", m)
			if err != nil {
				return req, errors.New("autoDeleteInterval must be -1 (never), 0 (right after stop) or a positive number of minutes")
			}
			req.AutoDeleteInterval = &d
		}
	}
	return req, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	req, err := DecodeCreate(r)
	if err != nil {
		writeError(w, wire.CodeInvalidRequest, v1Fields.Render(err))
		return
	}
	if len(req.Env) > 0 && host.CallerOf(r.Context()).SignIn != "" {
		writeError(w, wire.CodeTokenRequired, wire.SessionEnvRefused)
		return
	}
	sb, err := s.sup.Create(r.Context(), req)
	if errors.Is(err, supervisor.ErrConflict) {
		err = fmt.Errorf("%w (DELETE /v1/sandboxes/%s, or agent-control-plane rm %s)", err, req.Name, req.Name)
	}
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeCreateFailed)
		return
	}
	writeJSON(w, http.StatusCreated, ToInfo(sb))
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	force := false
	if v := r.URL.Query().Get("force"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, wire.CodeInvalidRequest, "force must be true or false")
			return
		}
		force = b
	}
	sb, err := s.sup.Stop(r.Context(), r.PathValue("id"), force)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeStopFailed)
		return
	}
	writeJSON(w, http.StatusOK, ToInfo(sb))
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if err := s.sup.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.writeSupervisorError(w, err, wire.CodeDeleteFailed)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// start starts a stopped sandbox again in place (its files kept); a
// running one answers as it is.
func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sup.Start(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeStartFailed)
		return
	}
	writeJSON(w, http.StatusOK, ToInfo(sb))
}

// resize applies new limits to a running sandbox (Daytona's resize; a
// disk or gpu other than 0 is refused, as at create).
func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		wire.Limits
		Disk *float64 `json:"disk,omitempty"`
		GPU  *float64 `json:"gpu,omitempty"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	if err := (wire.DaytonaFields{Disk: body.Disk, GPU: body.GPU}).Check(); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	l, err := toLimits(body.Limits)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeResizeFailed)
		return
	}
	sb, err := s.sup.Resize(r.Context(), r.PathValue("id"), l)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeResizeFailed)
		return
	}
	writeJSON(w, http.StatusOK, ToInfo(sb))
}

func (s *Server) refreshActivity(w http.ResponseWriter, r *http.Request) {
	if err := s.sup.RefreshActivity(r.PathValue("id")); err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) autostop(w http.ResponseWriter, r *http.Request) {
	var minutes float64
	if v := r.PathValue("interval"); v != "" {
		m, err := strconv.ParseFloat(v, 64)
		if err != nil {
			writeError(w, wire.CodeInvalidRequest, "interval must be a number of minutes")
			return
		}
		minutes = m
	} else {
		var body wire.AutostopRequest
		if err := decodeJSON(r, &body); err != nil {
			writeError(w, wire.CodeInvalidRequest, err.Error())
			return
		}
		if body.Interval == nil {
			writeError(w, wire.CodeInvalidRequest, "interval is required")
			return
		}
		minutes = *body.Interval
	}
	// One rule for minutes everywhere (create, config, this): a number
	// ≥ 0, fractions allowed.
	d, err := minutesToDuration("interval", minutes)
	if err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	sb, err := s.sup.SetAutoStop(r.PathValue("id"), d)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, ToInfo(sb))
}

// PreviewPort is the only sandbox port a preview URL can be asked for: the
// agent-server's.
const PreviewPort = 4000

func (s *Server) previewURL(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if p := q.Get("port"); p != "" && p != strconv.Itoa(PreviewPort) {
		writeError(w, wire.CodeInvalidRequest, "only port 4000 has a preview URL")
		return
	}
	if t := q.Get("ttl"); t != "" {
		if n, err := strconv.Atoi(t); err != nil || n < 0 {
			writeError(w, wire.CodeInvalidRequest, "ttl must be a whole number of seconds ≥ 0")
			return
		}
	}
	sb, err := s.sup.Get(r.PathValue("id"))
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	if !sb.State.Live() {
		writeError(w, wire.CodeSandboxNotRunning, "sandbox "+sb.ID+" is "+string(sb.State)+"; it has no preview")
		return
	}
	writeJSON(w, http.StatusOK, wire.PreviewURLResponse{URL: previewURL(sb)})
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	q, stamps, follow, msg := logQuery(r.URL.Query(), time.Now())
	if msg != "" {
		writeError(w, wire.CodeInvalidRequest, msg)
		return
	}
	if follow || q.All {
		q.Once = !follow
		s.followLogs(w, r, q)
		return
	}
	l, err := s.sup.EntrypointLogs(r.Context(), r.PathValue("id"), q)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, ToLogs(l, stamps))
}

// MaxLogLines bounds the tail parameter of entrypoint-logs.
const MaxLogLines = 100000

// logQuery reads entrypoint-logs' parameters; msg says what is wrong.
func logQuery(v url.Values, now time.Time) (q supervisor.LogQuery, stamps, follow bool, msg string) {
	if t := v.Get("tailBytes"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 || n > 1<<20 {
			return q, false, false, "tailBytes must be between 1 and 1048576"
		}
		q.TailBytes = n
	}
	if t := v.Get("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 || n > MaxLogLines {
			return q, false, false, fmt.Sprintf("tail must be a number of lines between 1 and %d", MaxLogLines)
		}
		q.Lines = n
	}
	if t := v.Get("since"); t != "" {
		at, err := wire.ParseSince(t, now)
		if err != nil {
			return q, false, false, err.Error()
		}
		q.Since = at
		if q.TailBytes == 0 {
			q.TailBytes = 1 << 20 // all since, as far as the bound goes
		}
	}
	if t := v.Get("until"); t != "" {
		at, err := wire.ParseSince(t, now)
		if err != nil {
			return q, false, false, strings.Replace(err.Error(), "since", "until", 1)
		}
		q.Until = at
	}
	switch q.Stream = v.Get("stream"); q.Stream {
	case "", supervisor.StreamStdout, supervisor.StreamStderr:
	default:
		return q, false, false, "stream must be stdout or stderr (absent: both)"
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"timestamps", &stamps}, {"follow", &follow}, {"all", &q.All}} {
		if t := v.Get(b.name); t != "" {
			var err error
			if *b.dst, err = strconv.ParseBool(t); err != nil {
				return q, false, false, b.name + " must be true or false"
			}
		}
	}
	return q, stamps, follow, ""
}

// ToLogs is the wire shape of a sandbox's logs: output merged in write
// order, each line after its time with stamps.
func ToLogs(l supervisor.Logs, stamps bool) wire.LogsResponse {
	out := wire.LogsResponse{Stdout: l.Stdout, Stderr: l.Stderr, Lines: make([]wire.LogLine, len(l.Lines)), Truncated: l.Cut}
	var merged strings.Builder
	for i, line := range l.Lines {
		at := line.At.UTC().Format(wire.LogTimeFormat)
		out.Lines[i] = wire.LogLine{Stream: line.Stream, Time: at, Text: line.Text}
		if stamps {
			merged.WriteString(at + " ")
		}
		merged.WriteString(line.Text)
	}
	out.Output = merged.String()
	return out
}
