package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/redact"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// TestCompatibilityRoutes is long because it walks every compatibility
// route against one sandbox, in the order a client calls them.
func TestCompatibilityRoutes(t *testing.T) {
	e := newRealEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"c1","autoStopInterval":5}`)
	info := e.waitState("c1", "started")

	before := info.LastActivityAt
	if r := e.do("POST", "/v1/sandboxes/c1/refresh-activity", ""); r.code != 204 {
		t.Fatalf("refresh: %d %s", r.code, r.body)
	}
	if after := e.info("c1"); !after.LastActivityAt.After(before.Time) && !after.LastActivityAt.Equal(before.Time) {
		t.Fatalf("refresh moved lastActivityAt backwards")
	}

	var got wire.SandboxInfo
	r := e.do("POST", "/v1/sandboxes/c1/autostop", `{"interval":30}`)
	json.Unmarshal(r.body, &got)
	if r.code != 200 || got.AutoStopInterval != 30 || got.AutoStopAt == nil ||
		!got.AutoStopAt.Equal(got.LastActivityAt.Add(30*60e9)) {
		t.Fatalf("autostop body: %d %s", r.code, r.body)
	}
	r = e.do("POST", "/v1/sandboxes/c1/autostop/0", "")
	json.Unmarshal(r.body, &got)
	if r.code != 200 || got.AutoStopInterval != 0 || got.AutoStopAt != nil {
		t.Fatalf("autostop path form: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/c1/autostop", `{"interval":1.5}`); r.code != 200 || !strings.Contains(string(r.body), `"autoStopInterval":1.5`) {
		t.Fatalf("autostop 1.5 minutes: %d %s", r.code, r.body)
	}
	for _, bad := range []string{`{"interval":-1}`, `{"interval":1e9}`, `{}`, `{"interval":"5"}`} {
		if r := e.do("POST", "/v1/sandboxes/c1/autostop", bad); r.code != 400 {
			t.Fatalf("autostop %s: %d", bad, r.code)
		}
	}
	if r := e.do("POST", "/v1/sandboxes/c1/autostop/abc", ""); r.code != 400 {
		t.Fatalf("autostop/abc: %d", r.code)
	}

	// These sandboxes have no cgroup: resizing to no limit is fine, a
	// limit is refused and says why; so is a Daytona disk (0 is fine: no
	// bound is what every sandbox here has).
	if r := e.do("POST", "/v1/sandboxes/c1/resize", `{"cpu":0,"disk":0}`); r.code != 200 {
		t.Fatalf("resize: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/c1/resize", `{"disk":10}`); r.code != 400 || !strings.Contains(string(r.body), "disk: a sandbox's disk is not bounded") {
		t.Fatalf("resize with a disk: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/c1/resize", `{"cpu":4}`); r.code != 400 || !strings.Contains(string(r.body), "limits_unsupported") || !strings.Contains(string(r.body), "cpu") {
		t.Fatalf("resize without cgroups: %d %s", r.code, r.body)
	}
	for _, bad := range []string{`{"cpu":-1}`, `{"memory":0.001}`, `{"pids":-5}`, `{"cpu":"2"}`, ``} {
		if r := e.do("POST", "/v1/sandboxes/c1/resize", bad); r.code != 400 || !strings.Contains(string(r.body), "invalid_request") {
			t.Fatalf("resize %s: %d %s", bad, r.code, r.body)
		}
	}

	var pu wire.PreviewURLResponse
	r = e.do("GET", "/v1/sandboxes/c1/preview-url?port=4000&ttl=60", "")
	json.Unmarshal(r.body, &pu)
	if r.code != 200 || pu.URL != info.PreviewURL {
		t.Fatalf("preview-url: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/v1/sandboxes/c1/preview-url?port=3000", ""); r.code != 400 {
		t.Fatalf("preview-url other port: %d", r.code)
	}

	// Force stop skips the grace: a child ignoring SIGTERM dies at once.
	e.do("POST", "/v1/sandboxes", `{"name":"stubborn","envVars":{"STUB_AGENT_IGNORE_SIGTERM":"1"}}`)
	e.waitState("stubborn", "started")
	if r := e.do("POST", "/v1/sandboxes/stubborn/stop?force=true", ""); r.code != 200 {
		t.Fatalf("force stop: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/stubborn/stop?force=maybe", ""); r.code != 400 {
		t.Fatalf("force=maybe: %d", r.code)
	}
	if r := e.do("GET", "/v1/sandboxes/stubborn/preview-url", ""); r.code != 409 {
		t.Fatalf("preview of a stopped sandbox: %d", r.code)
	}
	if r := e.do("POST", "/v1/sandboxes/stubborn/refresh-activity", ""); r.code != 409 || r.errCode() != "sandbox_not_running" {
		t.Fatalf("refresh of a stopped sandbox: %d %s", r.code, r.body)
	}
}

// A secret given in envVars, or forwarded by the daemon, never shows in
// entrypoint-logs or any other answer, whatever form the child prints it in.
func TestSecretsNeverInAnswers(t *testing.T) {
	const secret = `s3cr"et\value-Ω-`
	const forwarded = "fwd-credential-123456"
	e := newEnv(t, func(o *supervisor.Options) {
		o.Env.Forward = map[string]string{"ANTHROPIC_API_KEY": forwarded}
	})
	jsonOnce, _ := json.Marshal(secret)
	jsonTwice, _ := json.Marshal(string(jsonOnce))
	printed := "plain=" + secret + " json=" + string(jsonOnce) + " twice=" + string(jsonTwice) + " fwd=" + forwarded
	body, _ := json.Marshal(wire.CreateSandboxRequest{Name: "sec", EnvVars: map[string]string{
		"MY_API_TOKEN":     secret,
		"STUB_AGENT_PRINT": printed,
	}})
	if r := e.do("POST", "/v1/sandboxes", string(body)); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	e.waitState("sec", "started")

	// The forwarded key reached the child (standalone sandbox).
	envb, _ := os.ReadFile(filepath.Join(e.sup.Root(), "sec", supervisor.EnvFile))
	if !strings.Contains(string(envb), forwarded) {
		t.Fatal("forwarded credential missing from the child env")
	}

	var logs wire.LogsResponse
	testenv.Eventually(t, "stub output in logs", func() bool {
		r := e.do("GET", "/v1/sandboxes/sec/entrypoint-logs", "")
		json.Unmarshal(r.body, &logs)
		return strings.Contains(logs.Stdout, "plain=")
	})
	answers := []resp{
		e.do("GET", "/v1/sandboxes/sec/entrypoint-logs", ""),
		e.do("GET", "/v1/sandboxes/sec/entrypoint-logs?tailBytes=40", ""),
		e.do("GET", "/v1/sandboxes", ""),
		e.do("GET", "/v1/sandboxes/sec", ""),
		e.do("GET", "/metrics", ""),
	}
	w := e.watch("", "")
	snap, _ := json.Marshal(w.next().data)
	answers = append(answers, resp{body: snap})
	for _, needle := range []string{"s3cr", "value-Ω", forwarded} {
		for i, a := range answers {
			if strings.Contains(string(a.body), needle) {
				t.Fatalf("answer %d leaks %q:\n%s", i, needle, a.body)
			}
		}
	}
	if strings.Count(logs.Stdout, redact.Redacted) < 4 {
		t.Fatalf("expected four redactions in %q", logs.Stdout)
	}

	// A harness sandbox gets no forwarded credentials.
	e.do("POST", "/v1/sandboxes", `{"name":"harness","envVars":{"HARNESS_SESSION_ID":"h1"}}`)
	envb, _ = os.ReadFile(filepath.Join(e.sup.Root(), "harness", supervisor.EnvFile))
	if strings.Contains(string(envb), forwarded) {
		t.Fatal("forwarded credential given to a harness sandbox")
	}
}

// TestMetricsAfterScenario is long because the metrics it reads are
// those of the whole scenario it runs first.
func TestMetricsAfterScenario(t *testing.T) {
	e := newRealEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"m1","labels":{"origin":"cli"}}`)
	e.do("POST", "/v1/sandboxes", `{"name":"m2"}`)
	e.do("POST", "/v1/sandboxes", `{"name":"m1"}`)                   // conflict
	e.do("POST", "/v1/sandboxes", `{"name":"../bad"}`)               // invalid
	e.do("POST", "/v1/sandboxes", `{"name":"d","runtime":"docker"}`) // unsupported
	e.waitState("m1", "started")
	e.waitState("m2", "started")
	e.do("POST", "/v1/sandboxes/m1/stop", "")
	// Crash m2.
	b, _ := os.ReadFile(filepath.Join(e.sup.Root(), "m2", supervisor.RecordFile))
	rec, err := supervisor.DecodeRecord(b)
	if err != nil || rec.Handle == nil {
		t.Fatalf("m2's record: %v", err)
	}
	pid, err := native.PID(*rec.Handle)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	e.waitState("m2", "stopped")
	e.do("DELETE", "/v1/sandboxes/m1", "")
	w := e.watch("", "")
	w.next()

	lo, hi := e.sup.PortRange()
	want := []string{
		`agent_control_plane_sandbox_creates_total{result="ok"} 2`,
		`agent_control_plane_sandbox_creates_total{result="conflict"} 1`,
		`agent_control_plane_sandbox_creates_total{result="invalid"} 1`,
		`agent_control_plane_sandbox_creates_total{result="unsupported_runtime"} 1`,
		`agent_control_plane_sandbox_stops_total{reason="explicit"} 1`,
		`agent_control_plane_sandbox_stops_total{reason="crashed"} 1`,
		`agent_control_plane_sandbox_stops_total{reason="auto_stopped"} 0`,
		`agent_control_plane_sandboxes{runtime="native",state="stopped"} 1`,
		`agent_control_plane_sandboxes{runtime="native",state="started"} 0`,
		`agent_control_plane_port_leases 0`,
		`agent_control_plane_sandbox_ready_seconds_count{runtime="native"} 2`,
		`agent_control_plane_sandbox_ready_seconds_bucket{runtime="native",le="+Inf"} 2`,
		`agent_control_plane_port_range_size ` + strconv.Itoa(hi-lo+1),
		`agent_control_plane_event_subscribers 1`,
		`agent_control_plane_events_published_total{type="sandbox.created"} 2`,
		`agent_control_plane_events_published_total{type="sandbox.stopped"} 2`,
		`agent_control_plane_events_published_total{type="sandbox.deleted"} 1`,
		`agent_control_plane_http_requests_total{code="201",route="POST /v1/sandboxes"} 2`,
		`agent_control_plane_http_requests_total{code="409",route="POST /v1/sandboxes"} 1`,
		`agent_control_plane_http_requests_total{code="204",route="DELETE /v1/sandboxes/{id}"} 1`,
		`agent_control_plane_build_info{goversion="` + goruntime.Version() + `",version="test"} 1`,
	}
	// A read already shows m2 stopped when its exit is seen; the exit's
	// bookkeeping (port, event) lands a moment later. Scrape until it has.
	var body string
	missing := func() []string {
		body = string(e.do("GET", "/metrics", "").body)
		var out []string
		for _, line := range want {
			if !strings.Contains(body, line+"\n") {
				out = append(out, line)
			}
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			t.Fatalf("metrics lack %q", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(body, `"m1"`) || strings.Contains(body, "m2") {
		t.Error("a sandbox id reached a metric label")
	}
	// An event stream, once ended, is counted but is no latency.
	w.close()
	testenv.Eventually(t, "the ended stream counted", func() bool {
		body = string(e.do("GET", "/metrics", "").body)
		return strings.Contains(body, `agent_control_plane_http_requests_total{code="200",route="GET /v1/events"} 1`)
	})
	if strings.Contains(body, `http_request_duration_seconds_count{route="GET /v1/events"}`) {
		t.Error("an event stream's life is in the latency histogram")
	}
	if !strings.Contains(body, `http_request_duration_seconds_count{route="POST /v1/sandboxes"}`) {
		t.Error("requests are not in the latency histogram")
	}
}

// Bad bodies are answered in the API's terms: the field and the JSON type
// it wants, never a Go type.
func TestBodyErrorsNameFieldsNotGoTypes(t *testing.T) {
	e := newEnv(t, nil)
	for body, want := range map[string]string{
		`[1,2]`:                         "the body must be a JSON object, not array",
		`{"name":"x","labels":{"a":1}}`: "labels must be a string, not number",
		`{"name":"x","cpu":"2"}`:        "cpu must be a number, not string",
		`{"name":"x","pids":1.5}`:       "pids must be a whole number",
		`{"name":"x","colour":"blue"}`:  `unknown field \"colour\"`,
		`{"name":`:                      "malformed JSON body",
	} {
		r := e.do("POST", "/v1/sandboxes", body)
		if r.code != 400 || !strings.Contains(string(r.body), want) || strings.Contains(string(r.body), "Go ") || strings.Contains(string(r.body), "struct") {
			t.Errorf("%s: %d %s, want %q", body, r.code, r.body, want)
		}
	}
}

// A snapshot whose program is not on this machine answers 400
// program_not_found, naming it.
func TestMissingProgramIsTheCallers(t *testing.T) {
	e := newRealEnv(t, func(o *supervisor.Options) {
		o.Snapshots = []snapshot.Snapshot{{Name: "gone", Runtime: "native", Command: []string{"/nonexistent/agent-server"}}}
	})
	r := e.do("POST", "/v1/sandboxes", `{"name":"p1","snapshot":"gone"}`)
	if r.code != 400 || r.errCode() != "program_not_found" || !strings.Contains(string(r.body), "/nonexistent/agent-server") {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
}
