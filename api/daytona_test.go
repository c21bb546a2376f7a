// This file is long because its tests of Daytona's face share the
// requests and shapes declared here.

package api

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// dsb is what these tests read of Daytona's Sandbox.
type dsb struct {
	ID, Name, State, DesiredState, ErrorReason, OrganizationID, Target, ToolboxProxyURL string
	Recoverable                                                                         *bool
	Env, Labels                                                                         map[string]string
	AutoStopInterval, AutoArchiveInterval, AutoDeleteInterval, CPU, Memory, Disk, GPU   float64
	NetworkBlockAll                                                                     bool
	LastActivityAt                                                                      string
}

func (e *env) dget(id string) dsb {
	e.t.Helper()
	r := e.do("GET", "/api/sandbox/"+id, "")
	var sb dsb
	if r.code != 200 || json.Unmarshal(r.body, &sb) != nil {
		e.t.Fatalf("GET /api/sandbox/%s: %d %s", id, r.code, r.body)
	}
	return sb
}

func (e *env) dwait(id, state string) dsb {
	e.t.Helper()
	var sb dsb
	testenv.Eventually(e.t, id+" "+state, func() bool { sb = e.dget(id); return sb.State == state })
	return sb
}

// daytonaError checks Daytona's error shape and returns its message.
func daytonaError(t *testing.T, r resp, status int) string {
	t.Helper()
	var eb struct {
		StatusCode      int
		Error, Message  string
		Path, Timestamp string
	}
	if r.code != status || json.Unmarshal(r.body, &eb) != nil || eb.StatusCode != status || eb.Message == "" ||
		eb.Error != http.StatusText(status) || !strings.HasPrefix(eb.Path, "/") || eb.Timestamp == "" {
		t.Fatalf("want Daytona's error shape with %d, got %d %s", status, r.code, r.body)
	}
	return eb.Message
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDaytonaSandboxLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/api/sandbox", `{"env":{"NODE_ENV":"dev","OPENAI_API_KEY":"sk-abcdefghijklmnopqrstuvwx"},"labels":{"app":"x"},"target":"us","autoArchiveInterval":60}`,
		"X-Daytona-Organization-ID", "org", "X-Daytona-Source", "sdk-go", "X-Daytona-SDK-Version", "0.190.0")
	var sb dsb
	if r.code != 200 || json.Unmarshal(r.body, &sb) != nil {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	if !uuidRE.MatchString(sb.ID) || sb.Name != sb.ID || sb.Target != "local" || sb.GPU != 0 || sb.CPU <= 0 || sb.Memory <= 0 || sb.Disk <= 0 {
		t.Fatalf("create answer: %s", r.body)
	}
	if sb.Env["NODE_ENV"] != "[REDACTED]" || sb.Env["OPENAI_API_KEY"] != "[REDACTED]" || strings.Contains(string(r.body), "sk-abc") {
		t.Fatalf("env comes back redacted: %s", r.body)
	}
	if sb.AutoArchiveInterval != 60 || sb.AutoDeleteInterval != -1 || sb.OrganizationID != daytona.OrganizationID(e.sup.Root()) {
		t.Fatalf("intervals and organization: %s", r.body)
	}
	if want := e.srv.URL + "/api/toolbox"; sb.ToolboxProxyURL != want {
		t.Fatalf("toolboxProxyUrl %q, want %q", sb.ToolboxProxyURL, want)
	}
	e.dwait(sb.ID, "started")

	// Labels are replaced whole; the answer is the labels.
	if r := e.do("PUT", "/api/sandbox/"+sb.ID+"/labels", `{"labels":{"team":"b"}}`); r.code != 200 || string(r.body) != `{"labels":{"team":"b"}}`+"\n" {
		t.Fatalf("labels: %d %s", r.code, r.body)
	}
	before := e.dget(sb.ID).LastActivityAt
	// Timestamps have milliseconds: keep-alives until one lands in a later
	// one (each must answer 201 with no body).
	testenv.Eventually(t, "last-activity moves lastActivityAt", func() bool {
		if r := e.do("POST", "/api/sandbox/"+sb.ID+"/last-activity", ""); r.code != 201 || len(r.body) != 0 {
			t.Fatalf("last-activity: %d %s", r.code, r.body)
		}
		return e.dget(sb.ID).LastActivityAt > before
	})
	for _, c := range []struct{ path, field string }{{"autostop/30", "autoStopInterval"}, {"autoarchive/0", "autoArchiveInterval"}, {"autodelete/90", "autoDeleteInterval"}} {
		r := e.do("POST", "/api/sandbox/"+sb.ID+"/"+c.path, "")
		var m map[string]any
		json.Unmarshal(r.body, &m)
		want, _ := strconv.ParseFloat(c.path[strings.Index(c.path, "/")+1:], 64)
		if r.code != 200 || m[c.field] != want {
			t.Fatalf("%s: %d %s", c.path, r.code, r.body)
		}
	}
	for _, bad := range []string{"autostop/-1", "autostop/x", "autoarchive/-5", "autodelete/NaN"} {
		daytonaError(t, e.do("POST", "/api/sandbox/"+sb.ID+"/"+bad, ""), 400)
	}
	if r := e.do("POST", "/api/sandbox/"+sb.ID+"/stop", ""); r.code != 200 || e.dget(sb.ID).State != "stopped" {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	// Settings change on a stopped sandbox too; the keep-alive does not.
	if r := e.do("PUT", "/api/sandbox/"+sb.ID+"/labels", `{"labels":{"team":"c"}}`); r.code != 200 {
		t.Fatalf("labels of a stopped sandbox: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/api/sandbox/"+sb.ID+"/autodelete/-1", ""); r.code != 200 || e.dget(sb.ID).AutoDeleteInterval != -1 {
		t.Fatalf("autodelete -1: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("POST", "/api/sandbox/"+sb.ID+"/last-activity", ""), 409)
	if r := e.do("POST", "/api/sandbox/"+sb.ID+"/start", ""); r.code != 200 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	got := e.dwait(sb.ID, "started")
	if got.Labels["team"] != "c" || got.AutoArchiveInterval != 0 || got.AutoStopInterval != 30 {
		t.Fatalf("settings kept across stop and start: %+v", got)
	}
	r = e.do("DELETE", "/api/sandbox/"+sb.ID, "")
	if json.Unmarshal(r.body, &got); r.code != 200 || got.State != "destroyed" {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("GET", "/api/sandbox/"+sb.ID, ""), 404)
	daytonaError(t, e.do("DELETE", "/api/sandbox/"+sb.ID, ""), 404)
}

// A sandbox whose workload exits before it is ready is Daytona's error,
// recoverable: the SDK's wait for started ends there, and a start (or
// recover) runs it again.
func TestDaytonaStartupFailureIsError(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/api/sandbox", `{"name":"bad","env":{"STUB_AGENT_EXIT_AFTER_MS":"50","STUB_AGENT_READY_DELAY_MS":"60000"}}`)
	if r.code != 200 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	sb := e.dwait("bad", "error")
	if sb.Recoverable == nil || !*sb.Recoverable || !strings.HasPrefix(sb.ErrorReason, "exited_during_startup") || sb.DesiredState != "started" {
		t.Fatalf("error state: %+v", sb)
	}
	// /v1 keeps its own word for it.
	if st := e.info("bad").State; st != "stopped" {
		t.Fatalf("/v1 state %q", st)
	}
	list := e.do("GET", "/api/sandbox?states=error", "")
	if !strings.Contains(string(list.body), `"id":"bad"`) {
		t.Fatalf("states=error: %s", list.body)
	}
	if list := e.do("GET", "/api/sandbox?states=stopped", ""); strings.Contains(string(list.body), `"id":"bad"`) {
		t.Fatalf("states=stopped lists an errored sandbox: %s", list.body)
	}
	if r := e.do("POST", "/api/sandbox/bad/recover", ""); r.code != 200 || !strings.Contains(string(r.body), `"state":"starting"`) {
		t.Fatalf("recover: %d %s", r.code, r.body)
	}
}

// What a local sandbox cannot have is refused on both APIs, naming the
// field, and nothing is created.
func TestDaytonaFieldsRefusedNotDropped(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ body, names string }{
		{`"networkBlockAll":true`, "networkBlockAll"},
		{`"networkAllowList":"10.0.0.0/8"`, "networkAllowList"},
		{`"domainAllowList":"example.com"`, "domainAllowList"},
		{`"volumes":[{"volumeId":"v","mountPath":"/data"}]`, "volumes"},
		{`"gpu":1`, "gpu"},
		{`"disk":10`, "disk"},
		{`"user":"daytona"`, "user"},
		{`"linkedSandbox":"other"`, "linkedSandbox"},
		{`"buildInfo":{"dockerfileContent":"FROM x"}`, "buildInfo"},
		{`"gpu":1,"disk":10`, "gpu: sandboxes get no GPU here; disk"},
	} {
		msg := daytonaError(t, e.do("POST", "/api/sandbox", `{"name":"n1",`+c.body+`}`), 400)
		if !strings.Contains(msg, c.names) {
			t.Errorf("/api %s: %q does not name it", c.body, msg)
		}
		if c.body == `"linkedSandbox":"other"` || c.body == `"buildInfo":{"dockerfileContent":"FROM x"}` {
			continue // Daytona-only: /v1 never had them
		}
		r := e.do("POST", "/v1/sandboxes", `{"name":"n1",`+c.body+`}`)
		if r.code != 400 || r.errCode() != "invalid_request" || !strings.Contains(string(r.body), c.names) {
			t.Errorf("/v1 %s: %d %s", c.body, r.code, r.body)
		}
	}
	// What every sandbox here is passes.
	if r := e.do("POST", "/api/sandbox", `{"name":"n2","networkBlockAll":false,"gpu":0,"disk":0,"volumes":[],"target":"eu"}`); r.code != 200 {
		t.Fatalf("defaults refused: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/api/sandbox/n1", ""); r.code != 404 {
		t.Fatalf("a refused create left a sandbox: %d", r.code)
	}
	daytonaError(t, e.do("POST", "/api/sandbox", `{"nme":"typo"}`), 400)
	for _, p := range []string{"backup", "fork", "pause", "snapshot", "network-settings", "ssh-access"} {
		msg := daytonaError(t, e.do("POST", "/api/sandbox/n2/"+p, ""), 400)
		if !strings.Contains(msg, "not supported by this daemon") {
			t.Errorf("%s: %q", p, msg)
		}
	}
}

func TestDaytonaErrorsHaveDaytonaShape(t *testing.T) {
	e := newEnv(t, nil)
	daytonaError(t, e.do("GET", "/api/nothing-here", ""), 404)
	daytonaError(t, e.do("PATCH", "/api/sandbox", ""), 405)
	daytonaError(t, e.do("GET", "/api/sandbox", "", "Authorization", "Bearer wrong"), 401)
	daytonaError(t, e.do("POST", "/api/sandbox", `{}`, "Content-Type", "text/plain"), 415)
	daytonaError(t, e.do("GET", "/api/sandbox?limit=201", ""), 400)
	daytonaError(t, e.do("GET", "/api/sandbox?states=sleeping", ""), 400)
	daytonaError(t, e.do("GET", "/api/sandbox?order=desc", ""), 400)
	daytonaError(t, e.do("POST", "/api/sandbox", `{"name":"a/b"}`), 400)
	e.do("POST", "/api/sandbox", `{"name":"dup"}`)
	daytonaError(t, e.do("POST", "/api/sandbox", `{"name":"dup"}`), 409)
	// /v1 keeps its own.
	if r := e.do("GET", "/v1/nothing-here", ""); r.errCode() != "not_found" {
		t.Fatalf("/v1 error shape: %s", r.body)
	}
}

func TestDaytonaListPages(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 5 {
		e.do("POST", "/api/sandbox", `{"name":"p`+strconv.Itoa(i)+`","labels":{"set":"`+[]string{"a", "b"}[i%2]+`"}}`)
	}
	// A filter that is not a number is refused, not dropped.
	for _, q := range []string{"minCpu=NaN", "maxMemoryGiB=Inf", "labels=%zz"} {
		daytonaError(t, e.do("GET", "/api/sandbox?"+q, ""), 400)
	}
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "/api/sandbox?limit=2&labels=" + `%7B%22set%22%3A%22a%22%7D`
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		var page struct {
			Items      []dsb
			NextCursor *string
		}
		r := e.do("GET", q, "")
		if r.code != 200 || json.Unmarshal(r.body, &page) != nil || !strings.Contains(string(r.body), `"nextCursor":`) {
			t.Fatalf("list: %d %s", r.code, r.body)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
	}
	if strings.Join(ids, ",") != "p0,p2,p4" {
		t.Fatalf("labels filter over pages: %v", ids)
	}
	r := e.do("GET", "/api/sandbox?name=P1&states=started&states=starting", "")
	if !strings.Contains(string(r.body), `"id":"p1"`) || strings.Contains(string(r.body), `"id":"p0"`) {
		t.Fatalf("name prefix, repeated states: %s", r.body)
	}
	if r := e.do("GET", "/api/sandbox?states=archived", ""); string(r.body) != `{"items":[],"nextCursor":null}`+"\n" {
		t.Fatalf("a state no sandbox here is in: %s", r.body)
	}
}

// A preview reaches any port of the sandbox, wants its token (or the
// daemon's) unless the sandbox is public, keeps the daemon's credentials
// from the workload, runs the page in an origin of its own, and is no
// activity.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestDaytonaPreviewProxy(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/api/sandbox", `{"name":"pv","autoStopInterval":30}`)
	e.dwait("pv", "started")
	var seen http.Header
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		io.WriteString(w, r.Method+" "+r.URL.RequestURI())
	}))
	defer app.Close()
	_, port, _ := net.SplitHostPort(app.Listener.Addr().String())

	r := e.do("GET", "/api/sandbox/pv/ports/"+port+"/preview-url", "")
	var pv daytona.PortPreviewURL
	if r.code != 200 || json.Unmarshal(r.body, &pv) != nil || pv.SandboxID != "pv" || pv.Token == "" ||
		pv.URL != e.srv.URL+"/preview/pv/"+port {
		t.Fatalf("preview-url: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("GET", "/api/sandbox/pv/ports/0/preview-url", ""), 400)
	daytonaError(t, e.do("GET", "/api/sandbox/pv/ports/70000/preview-url", ""), 400)

	before := e.dget("pv").LastActivityAt
	raw := func(method, url string, hdr ...string) resp {
		req, _ := http.NewRequest(method, url, strings.NewReader("form=1"))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return resp{res.StatusCode, res.Header, b}
	}
	daytonaError(t, raw("GET", pv.URL+"/x"), 401)
	daytonaError(t, raw("GET", pv.URL+"/x", daytona.PreviewTokenHeader, "wrong"), 401)
	got := raw("POST", pv.URL+"/a/b?q=1", daytona.PreviewTokenHeader, pv.Token, "Content-Type", "application/x-www-form-urlencoded")
	if got.code != 200 || string(got.body) != "POST /a/b?q=1" {
		t.Fatalf("proxied: %d %s", got.code, got.body)
	}
	// The path goes as it was received: escapes are the workload's to read.
	got = raw("GET", pv.URL+"/a%2Fb/%2e%2e/c%20d", daytona.PreviewTokenHeader, pv.Token)
	if got.code != 200 || string(got.body) != "GET /a%2Fb/%2e%2e/c%20d" {
		t.Fatalf("escaped path: %d %s", got.code, got.body)
	}
	if got.hdr.Get("Content-Security-Policy") == "" || seen.Get(daytona.PreviewTokenHeader) != "" {
		t.Fatalf("the preview token reached the workload (%v) or the page shares the daemon's origin (%q)", seen, got.hdr.Get("Content-Security-Policy"))
	}
	if !strings.HasPrefix(got.hdr.Get("Content-Security-Policy"), "sandbox ") || strings.Contains(got.hdr.Get("Content-Security-Policy"), "allow-same-origin") {
		t.Fatalf("the preview's page is not in an opaque origin: %q", got.hdr.Get("Content-Security-Policy"))
	}
	// What a page in an opaque origin sends the daemon is refused.
	if r := e.do("GET", "/v1/sandboxes", "", "Origin", "null"); r.code != 403 {
		t.Fatalf("Origin: null: %d", r.code)
	}
	got = raw("GET", pv.URL+"/", "Authorization", "Bearer "+testToken)
	if got.code != 200 || seen.Get("Authorization") != "" {
		t.Fatalf("with the daemon's token: %d, Authorization reached the workload: %q", got.code, seen.Get("Authorization"))
	}
	// No credential of the daemon reaches the workload, in any header or
	// any place among several values; the workload's own credentials do.
	req, _ := http.NewRequest("GET", pv.URL+"/creds", nil)
	req.Header[daytona.PreviewTokenHeader] = []string{pv.Token}
	req.Header["Authorization"] = []string{"Bearer acps_SESSIONSECRETSESSIONSECRET", "Bearer " + testToken, "Basic d29ya2xvYWQ6b3du"}
	req.Header["X-Forwarded-Token"] = []string{"token=" + testToken}
	req.Header["Cookie"] = []string{"s=acps_COOKIESESSIONSECRET; theme=dark"}
	req.Close = true
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("credentials: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	for k, vs := range seen {
		for _, v := range vs {
			if strings.Contains(v, testToken) || strings.Contains(v, "acps_") || strings.Contains(v, pv.Token) {
				t.Fatalf("a credential of the daemon reached the workload in %s: %q", k, v)
			}
		}
	}
	if seen.Get("Authorization") != "Basic d29ya2xvYWQ6b3du" {
		t.Fatalf("the workload's own credential was dropped: %q", seen["Authorization"])
	}
	if got := raw("GET", pv.URL+"?a=b", daytona.PreviewTokenHeader, pv.Token); got.code != 308 || got.hdr.Get("Location") != "/preview/pv/"+port+"/?a=b" {
		t.Fatalf("no slash: %d %v", got.code, got.hdr)
	}
	if after := e.dget("pv").LastActivityAt; after != before {
		t.Fatalf("preview traffic moved the idle clock: %s → %s", before, after)
	}
	e.do("POST", "/api/sandbox/pv/public/true", "")
	if got := raw("GET", pv.URL+"/open"); got.code != 200 {
		t.Fatalf("public preview: %d %s", got.code, got.body)
	}
	daytonaError(t, raw("GET", e.srv.URL+"/preview/pv/1/"), 502)
	e.do("POST", "/api/sandbox/pv/stop", "")
	daytonaError(t, raw("GET", pv.URL+"/"), 409)
	daytonaError(t, e.do("GET", "/api/sandbox/pv/ports/"+port+"/preview-url", ""), 409)
	// A sandbox that does not exist answers as one the caller may not
	// see, but to the token's holder.
	daytonaError(t, raw("GET", e.srv.URL+"/preview/nope/80/"), 401)
	daytonaError(t, raw("GET", e.srv.URL+"/preview/nope/80/", "Authorization", "Bearer "+testToken), 404)
	// The token ends with the sandbox.
	e.do("DELETE", "/api/sandbox/pv", "")
	e.do("POST", "/api/sandbox", `{"name":"pv"}`)
	e.dwait("pv", "started")
	var again daytona.PortPreviewURL
	json.Unmarshal(e.do("GET", "/api/sandbox/pv/ports/"+port+"/preview-url", "").body, &again)
	if again.Token == pv.Token || again.Token == "" {
		t.Fatalf("a new sandbox of the same name has the old preview token")
	}
}

// A preview of a native sandbox reaches a port only while a process of
// that sandbox listens on it: never a loopback listener of another
// program, another sandbox's agent or the daemon's own port (nesting
// previews of the daemon held a connection per level, 1,100 deep).
func TestPreviewReachesOnlyItsSandbox(t *testing.T) {
	e := newRealEnv(t, nil)
	e.do("POST", "/api/sandbox", `{"name":"pa","public":true}`)
	e.do("POST", "/api/sandbox", `{"name":"pb"}`)
	e.dwait("pa", "started")
	e.dwait("pb", "started")
	hits := 0
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer other.Close()
	portOf := func(u string) string {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
		return p
	}
	agent := func(id string) string { return strconv.Itoa(e.info(id).Port) }
	get := func(path string) resp { return rawDo(t, "GET", e.srv.URL+path) }
	if r := get("/preview/pa/" + agent("pa") + "/api/info"); r.code != 200 {
		t.Fatalf("its own agent: %d %s", r.code, r.body)
	}
	for what, port := range map[string]string{
		"a loopback listener of another program": portOf(other.URL),
		"another sandbox's agent":                agent("pb"),
		"the daemon's own port":                  portOf(e.srv.URL),
	} {
		r := daytonaError(t, get("/preview/pa/"+port+"/"), 502)
		if !strings.Contains(r, "listens on port") {
			t.Errorf("%s: %s", what, r)
		}
	}
	nested := "/preview/pa/" + portOf(e.srv.URL)
	for range 1100 {
		nested += "/preview/pa/" + portOf(e.srv.URL)
	}
	daytonaError(t, get(nested+"/"), 502)
	if hits != 0 {
		t.Fatalf("the other program was reached %d times", hits)
	}
	// The answers the daemon makes itself carry the preview's policy.
	if r := get("/preview/pa/" + portOf(other.URL) + "/"); !strings.HasPrefix(r.hdr.Get("Content-Security-Policy"), "sandbox ") {
		t.Fatalf("a refusal without the policy: %v", r.hdr)
	}
}

// A stop or a delete that takes time reads stopping or destroying while
// it runs (/v1 keeps the state it had).
func TestDaytonaStoppingAndDestroying(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct{ method, path, during, after string }{
		{"POST", "/stop", "stopping", "stopped"},
		{"DELETE", "", "destroying", ""},
	} {
		e.do("POST", "/api/sandbox", `{"name":"slow","env":{"STUB_AGENT_IGNORE_SIGTERM":"1"}}`)
		e.dwait("slow", "started")
		done := make(chan resp, 1)
		go func() { done <- e.do(c.method, "/api/sandbox/slow"+c.path, "") }()
		sb := e.dwait("slow", c.during)
		if want := map[string]string{"stopping": "stopped", "destroying": "destroyed"}[c.during]; sb.DesiredState != want {
			t.Errorf("%s: desiredState %q", c.during, sb.DesiredState)
		}
		if st := e.info("slow").State; st != "started" {
			t.Errorf("/v1 during %s: %s", c.during, st)
		}
		if r := <-done; r.code != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.code, r.body)
		}
		if c.after != "" {
			e.dwait("slow", c.after)
			e.do("DELETE", "/api/sandbox/slow", "")
		}
	}
}

// A workload that forwards a preview's request back to the daemon's
// preview (a loop) is refused at the second pass, whatever port it came
// through: the fake runtime has no listening check to stop it first.
func TestPreviewLoopRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/api/sandbox", `{"name":"lp","public":true}`)
	e.dwait("lp", "started")
	var port string
	passes := 0
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passes++
		req, _ := http.NewRequest("GET", e.srv.URL+"/preview/lp/"+port+"/again", nil)
		req.Header = r.Header.Clone()
		req.Close = true
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			w.WriteHeader(599)
			return
		}
		defer res.Body.Close()
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body)
	}))
	defer app.Close()
	_, port, _ = net.SplitHostPort(app.Listener.Addr().String())
	req, _ := http.NewRequest("GET", e.srv.URL+"/preview/lp/"+port+"/", nil)
	req.Close = true
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusLoopDetected || passes != 1 {
		t.Fatalf("a preview loop: %d after %d passes: %s", res.StatusCode, passes, b)
	}
}

// A fault the core finds is named with the field each face's caller
// sent: Daytona's create says env, its execute envs, /v1's create
// envVars, /v1's exec env; the limits are named as sent too.
func TestEachFaceNamesItsFields(t *testing.T) {
	e := newRealEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"named"}`)
	e.waitState("named", "started")
	for _, c := range []struct {
		method, path, body string
		want, not          string
	}{
		{"POST", "/api/sandbox", `{"name":"d1","env":{"1BAD":"x"}}`, "env key", "envVars"},
		{"POST", "/v1/sandboxes", `{"name":"v1","envVars":{"1BAD":"x"}}`, "envVars key", ""},
		{"POST", "/api/toolbox/named/process/execute", `{"command":"true","envs":{"1BAD":"x"}}`, "envs key", "envVars"},
		{"POST", "/v1/sandboxes/named/exec", `{"argv":["true"],"env":{"1BAD":"x"}}`, "env key", "envVars"},
		{"POST", "/api/sandbox", `{"name":"d2","cpu":-1}`, "cpu must be", ""},
		{"POST", "/v1/sandboxes", `{"name":"v2","memory":0.001}`, "memory must be", ""},
	} {
		r := e.do(c.method, c.path, c.body)
		if r.code != 400 || !strings.Contains(string(r.body), c.want) || c.not != "" && strings.Contains(string(r.body), c.not) {
			t.Errorf("%s %s %s: %d %s, want %q", c.method, c.path, c.body, r.code, r.body, c.want)
		}
	}
}

// A feature this daemon does not have answers 400 in Daytona's shape,
// naming it, at every path and method an SDK calls it by (a 404 or 405
// would read as a bug of the daemon's, not a refusal).
func TestDaytonaRefusedFeaturesAnswer400(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/api/sandbox", `{"name":"rf"}`)
	for _, c := range []struct{ method, path, names string }{
		{"POST", "/api/toolbox/rf/git/no-such-operation", "git operation"},
		{"POST", "/api/toolbox/rf/computeruse/start", "computer use"},
		{"GET", "/api/toolbox/rf/computeruse/status", "computer use"},
		{"POST", "/api/volumes/v1/no-such-operation", "volume operation"},
		{"POST", "/api/snapshots", "changing snapshots"},
		{"DELETE", "/api/snapshots/default", "changing snapshots"},
		{"GET", "/api/snapshots/default/build-logs", "snapshot builds"},
	} {
		msg := daytonaError(t, e.do(c.method, c.path, ""), 400)
		if !strings.Contains(msg, c.names) || !strings.Contains(msg, "not supported by this daemon") {
			t.Errorf("%s %s: %q", c.method, c.path, msg)
		}
	}
}

// The snapshot list is the configuration's, paged as Daytona's document
// says, and one snapshot is found by its name.
func TestDaytonaSnapshots(t *testing.T) {
	e := newEnv(t, func(o *supervisor.Options) {
		grace := time.Second
		for _, n := range []string{"default", "alpha", "beta", "gamma"} {
			o.Snapshots = append(o.Snapshots, snapshot.Snapshot{Name: n, Runtime: "native", Command: []string{"agent", n}, StopGrace: &grace})
		}
	})
	var page daytona.PaginatedSnapshots
	r := e.do("GET", "/api/snapshots?limit=2&page=2&sort=name&order=asc", "")
	if r.code != 200 || json.Unmarshal(r.body, &page) != nil || page.Total != 4 || page.TotalPages != 2 || page.Page != 2 || len(page.Items) != 2 || page.Items[0].Name != "default" || page.Items[1].Name != "gamma" {
		t.Fatalf("page 2 of 2: %d %s", r.code, r.body)
	}
	if it := page.Items[1]; it.ID != "gamma" || it.State != "active" || !slices.Equal(it.Entrypoint, []string{"agent", "gamma"}) || it.CreatedAt == "" {
		t.Errorf("a snapshot: %+v", it)
	}
	r = e.do("GET", "/api/snapshots?name=AL", "")
	if json.Unmarshal(r.body, &page) != nil || page.Total != 1 || page.Items[0].Name != "alpha" {
		t.Errorf("by a part of the name: %s", r.body)
	}
	if r := e.do("GET", "/api/snapshots/beta", ""); r.code != 200 || !strings.Contains(string(r.body), `"name":"beta"`) {
		t.Errorf("one snapshot: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("GET", "/api/snapshots/nope", ""), 404)
	for _, q := range []string{"limit=201", "page=0", "sort=size", "order=up"} {
		daytonaError(t, e.do("GET", "/api/snapshots?"+q, ""), 400)
	}
}

// An archive stops the sandbox and shows it archived, in a get and a
// list; a start brings it back, and the next stop is a stop.
func TestDaytonaArchive(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/api/sandbox", `{"name":"ar"}`)
	e.waitState("ar", "started")
	state := func(r resp) string {
		var sb struct{ State string }
		json.Unmarshal(r.body, &sb)
		return sb.State
	}
	if r := e.do("POST", "/api/sandbox/ar/archive", ""); r.code != 200 || state(r) != "archived" {
		t.Fatalf("archive: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/api/sandbox/ar", ""); state(r) != "archived" {
		t.Fatalf("get: %s", r.body)
	}
	if r := e.do("GET", "/api/sandbox?states=archived", ""); !strings.Contains(string(r.body), `"id":"ar"`) {
		t.Fatalf("list of the archived: %s", r.body)
	}
	if r := e.do("GET", "/v1/sandboxes/ar", ""); !strings.Contains(string(r.body), `"state":"stopped"`) {
		t.Fatalf("/v1 sees: %s", r.body)
	}
	if r := e.do("POST", "/api/sandbox/ar/start", ""); r.code != 200 {
		t.Fatalf("start: %d %s", r.code, r.body)
	}
	e.waitState("ar", "started")
	if r := e.do("POST", "/api/sandbox/ar/stop", ""); r.code != 200 || state(r) != "stopped" {
		t.Fatalf("a stop after the start: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("POST", "/api/sandbox/nope/archive", ""), 404)
}

// Volumes: made, listed, found by id and by name, one name each; a
// sandbox whose runtime cannot mount them is refused naming the field; a
// mounted volume cannot be deleted; a deleted one is gone with its files.
func TestDaytonaVolumes(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/api/volumes", `{"name":"data"}`)
	var v daytona.VolumeDto
	if json.Unmarshal(r.body, &v); r.code != 200 || v.Name != "data" || v.State != "ready" || v.ID == "" {
		t.Fatalf("create a volume: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("POST", "/api/volumes", `{"name":"data"}`), 409)
	daytonaError(t, e.do("POST", "/api/volumes", `{"name":"../x"}`), 400)
	for _, p := range []string{"/api/volumes/" + v.ID, "/api/volumes/by-name/data"} {
		if r := e.do("GET", p, ""); r.code != 200 || !strings.Contains(string(r.body), `"id":"`+v.ID+`"`) {
			t.Fatalf("GET %s: %d %s", p, r.code, r.body)
		}
	}
	if r := e.do("GET", "/api/volumes", ""); r.code != 200 || !strings.Contains(string(r.body), `"name":"data"`) {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
	data := filepath.Join(e.sup.Root(), supervisor.VolumesDir, v.ID, "data")
	if fi, err := os.Stat(data); err != nil || !fi.IsDir() {
		t.Fatalf("the volume's directory: %v", err)
	}
	msg := daytonaError(t, e.do("POST", "/api/sandbox", `{"name":"vm","volumes":[{"volumeId":"`+v.ID+`","mountPath":"/data"}]}`), 400)
	if !strings.Contains(msg, "volumes") || !strings.Contains(msg, "docker") {
		t.Errorf("volumes on a runtime that cannot mount them: %q", msg)
	}
	if r := e.do("DELETE", "/api/volumes/"+v.ID, ""); r.code != 200 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("GET", "/api/volumes/"+v.ID, ""), 404)
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a deleted volume's files remain: %v", err)
	}
}
