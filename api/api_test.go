package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/host"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

var portBlock = testenv.PortBlock{Base: 28000, Size: 40}

// testToken is the bearer token of every in-process test server;
// authClient sends it with every request that carries no Authorization.
var (
	testToken  = testenv.NewToken()
	authClient = &http.Client{Transport: testenv.AuthTransport{Token: testToken}}
)

type env struct {
	t   *testing.T
	sup *supervisor.Supervisor
	srv *httptest.Server
	reg *prometheus.Registry
}

// newEnv serves the API over a supervisor whose one runtime, "native",
// is the fake: the handlers in milliseconds, with no real process.
func newEnv(t *testing.T, tweak func(*supervisor.Options)) *env {
	t.Helper()
	return startEnv(t, false, tweak)
}

// newRealEnv is newEnv with the real native runtime and stub agent.
func newRealEnv(t *testing.T, tweak func(*supervisor.Options)) *env {
	t.Helper()
	return startEnv(t, true, tweak)
}

func startEnv(t *testing.T, real bool, tweak func(*supervisor.Options)) *env {
	t.Helper()
	w, err := proc.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	machine := fake.NewMachine()
	var rt runtime.Runtime = &fake.Runtime{M: machine, LocalPort: true}
	if real {
		rt = &native.Runtime{Watcher: w, Argv: testenv.StubArgv(t)}
	}
	lo, hi := portBlock.Next()
	opts := supervisor.Options{
		Root: t.TempDir(), PortLo: lo, PortHi: hi, StopGrace: 2 * time.Second,
		CheckInterval: time.Hour, AutoStop: 15 * time.Minute,
		Runtimes: nativeOnly(rt),
		Env:      childenv.Policy{Base: map[string]string{"PATH": "/usr/bin:/bin"}, ForwardUnless: conf.DefaultEnvForwardUnless},
	}
	if tweak != nil {
		tweak(&opts)
	}
	sup, err := supervisor.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := New(sup, Options{Daytona: sup, Version: "test", Registry: reg, Heartbeat: 50 * time.Millisecond, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		sup.Close(context.Background())
		w.Close()
		testenv.KillSandboxes(opts.Root)
		machine.Shutdown()
	})
	return &env{t: t, sup: sup, srv: srv, reg: reg}
}

type resp struct {
	code int
	hdr  http.Header
	body []byte
}

func (r resp) errCode() string {
	var e wire.ErrorBody
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (e *env) do(method, path string, body string, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := authClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

func (e *env) info(id string) wire.SandboxInfo {
	e.t.Helper()
	r := e.do("GET", "/v1/sandboxes/"+id, "")
	var info wire.SandboxInfo
	if r.code != 200 || json.Unmarshal(r.body, &info) != nil {
		e.t.Fatalf("get %s: %d %s", id, r.code, r.body)
	}
	return info
}

func (e *env) waitState(id, state string) wire.SandboxInfo {
	e.t.Helper()
	var info wire.SandboxInfo
	testenv.Eventually(e.t, id+" "+state, func() bool { info = e.info(id); return info.State == state })
	return info
}

// Every route table of the host: each sorted by path then method as it
// claims, each operation once, no GET logged as a change, and an
// operation both faces offer logged and guarded alike.
func TestRouteTables(t *testing.T) {
	s := &Server{}
	byPath := func(a, b host.Route) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Method, b.Method))
	}
	all := map[string]host.Route{}
	if !slices.IsSortedFunc(routes, func(a, b route) int {
		return cmp.Or(strings.Compare(a.path, b.path), strings.Compare(a.method, b.method))
	}) {
		t.Errorf("the /v1 table is not sorted by path, then method")
	}
	for name, face := range map[string]host.Face{"/v1": s.v1Face(), "/api": s.daytonaFace(&daytona.API{})} {
		table := face.Routes
		if name == "/api" && !slices.IsSortedFunc(table, byPath) {
			t.Errorf("the %s table is not sorted by path, then method", name)
		}
		for _, rt := range table {
			op := rt.Method + " " + rt.Path
			if _, dup := all[op]; dup {
				t.Errorf("%s is routed twice", op)
			}
			all[op] = rt
			if rt.Method == "GET" && rt.Mutates {
				t.Errorf("%s is logged as a change", op)
			}
		}
	}
	const tb = "/api/toolbox/{id}"
	for _, same := range [][2]string{
		{"GET /v1/sandboxes", "GET /api/sandbox"},
		{"POST /v1/sandboxes", "POST /api/sandbox"},
		{"GET /v1/sandboxes/{id}", "GET /api/sandbox/{id}"},
		{"DELETE /v1/sandboxes/{id}", "DELETE /api/sandbox/{id}"},
		{"POST /v1/sandboxes/{id}/start", "POST /api/sandbox/{id}/start"},
		{"POST /v1/sandboxes/{id}/stop", "POST /api/sandbox/{id}/stop"},
		{"POST /v1/sandboxes/{id}/resize", "POST /api/sandbox/{id}/resize"},
		{"POST /v1/sandboxes/{id}/autostop/{interval}", "POST /api/sandbox/{id}/autostop/{interval}"},
		{"POST /v1/sandboxes/{id}/refresh-activity", "POST /api/sandbox/{id}/last-activity"},
		{"GET /v1/sandboxes/{id}/preview-url", "GET /api/sandbox/{id}/ports/{port}/preview-url"},
		{"GET /v1/sandboxes/{id}/entrypoint-logs", "GET " + tb + "/process/session/entrypoint/logs"},
		{"POST /v1/sandboxes/{id}/exec", "POST " + tb + "/process/execute"},
		{"GET /v1/sandboxes/{id}/files", "GET " + tb + "/files"},
		{"GET /v1/sandboxes/{id}/files/content", "GET " + tb + "/files/download"},
		{"PUT /v1/sandboxes/{id}/files/content", "POST " + tb + "/files/upload"},
		{"POST /v1/sandboxes/{id}/sessions", "POST " + tb + "/process/session"},
		{"DELETE /v1/sandboxes/{id}/sessions/{session}", "DELETE " + tb + "/process/session/{sid}"},
		{"POST /v1/sandboxes/{id}/sessions/{session}/exec", "POST " + tb + "/process/session/{sid}/exec"},
	} {
		a, okA := all[same[0]]
		b, okB := all[same[1]]
		switch {
		case !okA || !okB:
			t.Errorf("%s or %s is not routed", same[0], same[1])
		case a.Mutates != b.Mutates:
			t.Errorf("%s is logged as a change: %v, %s: %v", same[0], a.Mutates, same[1], b.Mutates)
		case a.Access != b.Access:
			t.Errorf("%s is guarded as %d, %s as %d", same[0], a.Access, same[1], b.Access)
		}
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	big := `{"name":"big","envVars":{"A":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`
	tests := []struct {
		why     string
		method  string
		path    string
		body    string
		hdr     []string
		code    int
		errCode string
	}{
		{"traversal in name", "POST", "/v1/sandboxes", `{"name":"../etc"}`, nil, 400, "invalid_request"},
		{"name too long", "POST", "/v1/sandboxes", `{"name":"` + strings.Repeat("a", 64) + `"}`, nil, 400, "invalid_request"},
		{"leading dot", "POST", "/v1/sandboxes", `{"name":".hidden"}`, nil, 400, "invalid_request"},
		{"missing name", "POST", "/v1/sandboxes", `{}`, nil, 400, "invalid_request"},
		{"not JSON", "POST", "/v1/sandboxes", `{"name":`, nil, 400, "invalid_request"},
		{"two values", "POST", "/v1/sandboxes", `{"name":"a"}{"name":"b"}`, nil, 400, "invalid_request"},
		{"unknown field", "POST", "/v1/sandboxes", `{"name":"a","bogus":1}`, nil, 400, "invalid_request"},
		{"bad env key", "POST", "/v1/sandboxes", `{"name":"a","envVars":{"1BAD":"x"}}`, nil, 400, "invalid_request"},
		{"env key with =", "POST", "/v1/sandboxes", `{"name":"a","envVars":{"A=B":"x"}}`, nil, 400, "invalid_request"},
		{"env sets the port", "POST", "/v1/sandboxes", `{"name":"a","envVars":{"PORT":"1"}}`, nil, 400, "invalid_request"},
		{"env sets the workspace", "POST", "/v1/sandboxes", `{"name":"a","envVars":{"AGENT_WORKSPACE_DIR":"/"}}`, nil, 400, "invalid_request"},
		{"reserved marker key", "POST", "/v1/sandboxes", `{"name":"a","envVars":{"AGENT_CONTROL_PLANE_MARKER":"x"}}`, nil, 400, "invalid_request"},
		{"label value too long", "POST", "/v1/sandboxes", `{"name":"a","labels":{"k":"` + strings.Repeat("v", 513) + `"}}`, nil, 400, "invalid_request"},
		{"negative autostop", "POST", "/v1/sandboxes", `{"name":"a","autoStopInterval":-1}`, nil, 400, "invalid_request"},
		{"autodelete -2", "POST", "/v1/sandboxes", `{"name":"a","autoDeleteInterval":-2}`, nil, 400, "invalid_request"},
		{"unknown runtime", "POST", "/v1/sandboxes", `{"name":"a","runtime":"vm"}`, nil, 400, "unsupported_runtime"},
		{"runtime not a name", "POST", "/v1/sandboxes", `{"name":"a","runtime":"Native!"}`, nil, 400, "unsupported_runtime"},
		{"docker not registered", "POST", "/v1/sandboxes", `{"name":"a","runtime":"docker"}`, nil, 400, "unsupported_runtime"},
		{"body too large", "POST", "/v1/sandboxes", big, nil, 400, "invalid_request"},
		{"form post", "POST", "/v1/sandboxes", `name=a`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"text/plain", "POST", "/v1/sandboxes", `{"name":"a"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"rebinding host", "GET", "/v1/info", "", []string{"Host", "attacker.example:4025"}, 403, "forbidden_host"},
		{"a loopback host whose port goes on", "GET", "/v1/info", "", []string{"Host", "127.0.0.1:4025.evil.example"}, 403, "forbidden_host"},
		{"a port that is not one", "GET", "/v1/info", "", []string{"Host", "localhost:99999"}, 403, "forbidden_host"},
		{"two ports", "GET", "/v1/info", "", []string{"Host", "127.0.0.1:4025:80"}, 403, "forbidden_host"},
		{"a query that does not parse", "GET", "/v1/sandboxes?labels=%zz", "", nil, 400, "invalid_request"},
		{"a query past its bound of parameters", "GET", "/v1/sandboxes?" + strings.Repeat("a=1&", 10001), "", nil, 400, "invalid_request"},
		{"a query past its bound of bytes", "GET", "/v1/sandboxes?a=" + strings.Repeat("x", 17<<10), "", nil, 400, "invalid_request"},
		{"foreign origin", "GET", "/v1/sandboxes", "", []string{"Origin", "https://evil.example"}, 403, "forbidden_origin"},
		{"https localhost origin", "GET", "/v1/sandboxes", "", []string{"Origin", "https://localhost:3000"}, 403, "forbidden_origin"},
		{"null origin", "POST", "/v1/sandboxes/x/stop", "", []string{"Origin", "null"}, 403, "forbidden_origin"},
		{"unknown sandbox", "GET", "/v1/sandboxes/nope", "", nil, 404, "not_found"},
		{"unknown route", "GET", "/v2/things", "", nil, 404, "not_found"},
		{"wrong method", "PUT", "/v1/sandboxes", "", nil, 405, "method_not_allowed"},
		{"bad filter", "GET", "/v1/sandboxes?labels=notjson", "", nil, 400, "invalid_request"},
		{"stop unknown", "POST", "/v1/sandboxes/nope/stop", "", nil, 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.body, tc.hdr...)
			if r.code != tc.code || r.errCode() != tc.errCode {
				t.Fatalf("%s %s: %d %s, want %d %s", tc.method, tc.path, r.code, r.body, tc.code, tc.errCode)
			}
			if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("error Content-Type %q", ct)
			}
		})
	}
	// None of those left anything.
	if list := e.sup.List(nil); len(list) != 0 {
		t.Fatalf("bad requests created sandboxes: %v", list)
	}
}

func TestLocalOriginsGetCORS(t *testing.T) {
	e := newEnv(t, nil)
	for _, origin := range []string{"http://localhost:4000", "http://127.0.0.1:5173", "http://[::1]:3000"} {
		r := e.do("GET", "/v1/info", "", "Origin", origin)
		if r.code != 200 || r.hdr.Get("Access-Control-Allow-Origin") != origin {
			t.Fatalf("origin %s: %d, ACAO %q", origin, r.code, r.hdr.Get("Access-Control-Allow-Origin"))
		}
	}
	r := e.do("OPTIONS", "/v1/sandboxes", "", "Origin", "http://localhost:4000", "Access-Control-Request-Method", "POST")
	if r.code != 204 || !strings.Contains(r.hdr.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight: %d %v", r.code, r.hdr)
	}
	if r := e.do("GET", "/v1/info", ""); r.hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS header without an Origin")
	}
}

func TestCRUDOverHTTP(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/v1/sandboxes", `{"name":"web1","labels":{"origin":"web-ui","harnessSessionId":"s-1"},"envVars":{"SECRET_TOKEN":"hunter2hunter2"}}`)
	if r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	if bytes.Contains(r.body, []byte("hunter2")) {
		t.Fatal("create answer holds an env value")
	}
	var created wire.SandboxInfo
	json.Unmarshal(r.body, &created)
	if created.ID != "web1" || created.Name != "web1" || created.SessionID == nil || *created.SessionID != "s-1" ||
		created.PreviewURL != "http://127.0.0.1:"+strconv.Itoa(created.Port) || created.AutoStopInterval != 15 || created.AutoDeleteInterval != -1 {
		t.Fatalf("created %+v", created)
	}
	if r := e.do("POST", "/v1/sandboxes", `{"name":"web1"}`); r.code != 409 || r.errCode() != "name_conflict" || !strings.Contains(string(r.body), "rm web1") {
		t.Fatalf("conflict: %d %s", r.code, r.body)
	}
	e.do("POST", "/v1/sandboxes", `{"name":"cli1","labels":{"origin":"cli"}}`)
	e.waitState("web1", "started")

	var list wire.ListResponse
	json.Unmarshal(e.do("GET", "/v1/sandboxes?label.origin=web-ui", "").body, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != "web1" {
		t.Fatalf("filtered list %+v", list)
	}
	json.Unmarshal(e.do("GET", `/v1/sandboxes?labels={"origin":"cli"}`, "").body, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != "cli1" {
		t.Fatalf("Daytona-style filtered list %+v", list)
	}

	r = e.do("POST", "/v1/sandboxes/web1/stop", "")
	var stopped wire.SandboxInfo
	json.Unmarshal(r.body, &stopped)
	if r.code != 200 || stopped.State != "stopped" || stopped.AutoStopAt != nil {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/web1/start", ""); r.code != 200 || !strings.Contains(string(r.body), `"state":"starting"`) {
		t.Fatalf("start again: %d %s", r.code, r.body)
	}
	e.waitState("web1", "started")
	for _, id := range []string{"web1", "cli1", "never-existed"} {
		if r := e.do("DELETE", "/v1/sandboxes/"+id, ""); r.code != 204 {
			t.Fatalf("delete %s: %d %s", id, r.code, r.body)
		}
	}
	if r := e.do("GET", "/v1/sandboxes/web1", ""); r.code != 404 {
		t.Fatalf("get after delete: %d", r.code)
	}
}

func TestInfo(t *testing.T) {
	e := newEnv(t, nil)
	var info wire.Info
	json.Unmarshal(e.do("GET", "/v1/info", "").body, &info)
	lo, hi := e.sup.PortRange()
	if info.Name != wire.Name || info.APIVersion != wire.APIVersion || info.PID == 0 || info.Root != e.sup.Root() ||
		info.PortRange != strconv.Itoa(lo)+"-"+strconv.Itoa(hi) || info.StartedAt.IsZero() {
		t.Fatalf("info %+v", info)
	}
}

// The wire package repeats the supervisor's event and state names so that
// clients need not import the supervisor; they must stay equal.
func TestWireNamesMatchSupervisor(t *testing.T) {
	pairs := [][2]string{
		{wire.EventReplaced, supervisor.EventReplaced}, {wire.EventCreated, supervisor.EventCreated},
		{wire.EventStarted, supervisor.EventStarted}, {wire.EventStopped, supervisor.EventStopped},
		{wire.EventDeleted, supervisor.EventDeleted}, {wire.EventStarting, supervisor.EventStarting},
		{wire.StateStarting, string(supervisor.Starting)}, {wire.StateStarted, string(supervisor.Started)},
		{wire.StateStopped, string(supervisor.Stopped)}, {wire.StateDestroyed, string(supervisor.Destroyed)},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("wire %q != supervisor %q", p[0], p[1])
		}
	}
}

// nativeOnly registers rt as the daemon's one runtime, "native".
func nativeOnly(rt runtime.Runtime) *runtime.Registry {
	r := &runtime.Registry{}
	if err := r.Register("native", rt); err != nil {
		panic(err)
	}
	return r
}
