package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// contract checks real answers against api/openapi.yaml.
type contract struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	paths    []pathTemplate
	seen     map[string]bool // "METHOD template status"
}

type pathTemplate struct {
	tpl      string
	re       *regexp.Regexp
	literals int
}

const docURL = "mem://openapi.json"

func loadContract(t *testing.T, raw []byte, mutate func(map[string]any)) *contract {
	t.Helper()
	var y any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if mutate != nil {
		mutate(y.(map[string]any))
	}
	// Round-trip through JSON so numbers and maps have JSON's types.
	js, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("openapi.yaml is not JSON-compatible: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, doc); err != nil {
		t.Fatal(err)
	}
	ct := &contract{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}, seen: map[string]bool{}}
	if v, _ := ct.doc["openapi"].(string); v != "3.1.0" {
		t.Fatalf("openapi version %q", v)
	}
	for tpl := range ct.doc["paths"].(map[string]any) {
		pattern := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tpl), `[^/]+`) + "$"
		ct.paths = append(ct.paths, pathTemplate{tpl: tpl, re: regexp.MustCompile(pattern), literals: strings.Count(tpl, "/") - strings.Count(tpl, "{")})
	}
	// Prefer the template with the most literal segments.
	slices.SortFunc(ct.paths, func(a, b pathTemplate) int { return b.literals - a.literals })
	return ct
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (c *contract) schema(ptr string) (*jsonschema.Schema, error) {
	if s, ok := c.schemas[ptr]; ok {
		return s, nil
	}
	s, err := c.compiler.Compile(docURL + "#" + ptr)
	if err != nil {
		return nil, err
	}
	c.schemas[ptr] = s
	return s, nil
}

func (c *contract) match(path string) (string, bool) {
	for _, p := range c.paths {
		if p.re.MatchString(path) {
			return p.tpl, true
		}
	}
	return "", false
}

// resolve follows a local $ref and returns the object and its pointer.
func (c *contract) resolve(obj map[string]any, ptr string) (map[string]any, string) {
	ref, ok := obj["$ref"].(string)
	if !ok {
		return obj, ptr
	}
	ptr = strings.TrimPrefix(ref, "#")
	var cur any = c.doc
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		cur = cur.(map[string]any)[part]
	}
	return cur.(map[string]any), ptr
}

// check validates one real answer against the document.
func (c *contract) check(method, path string, status int, hdr http.Header, body []byte) error {
	tpl, ok := c.match(path)
	if !ok {
		return fmt.Errorf("%s %s: path not in the document", method, path)
	}
	m := strings.ToLower(method)
	op, ok := c.doc["paths"].(map[string]any)[tpl].(map[string]any)[m].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: operation not in the document", method, tpl)
	}
	code := strconv.Itoa(status)
	r, ok := op["responses"].(map[string]any)[code].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: status %d not documented (body %s)", method, tpl, status, body)
	}
	c.seen[method+" "+tpl+" "+code] = true
	resp, ptr := c.resolve(r, "/paths/"+pointerEscape(tpl)+"/"+m+"/responses/"+code)
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		if len(body) != 0 {
			return fmt.Errorf("%s %s %d: documented without a body, got %q", method, tpl, status, body)
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(hdr.Get("Content-Type"))
	if err != nil {
		return fmt.Errorf("%s %s %d: bad Content-Type %q", method, tpl, status, hdr.Get("Content-Type"))
	}
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s %s %d: Content-Type %s not documented", method, tpl, status, mt)
	}
	if mt != "application/json" {
		return nil // event streams are checked frame by frame
	}
	return c.validate(ptr+"/content/application~1json/schema", body)
}

func (c *contract) validate(ptr string, body []byte) error {
	sch, err := c.schema(ptr)
	if err != nil {
		return fmt.Errorf("compile %s: %w", ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("answer is not JSON: %v: %s", err, body)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("answer does not match %s: %v\n%s", ptr, err, body)
	}
	return nil
}

// client records and checks every exchange with the daemon.
type contractClient struct {
	t    *testing.T
	c    *contract
	url  string
	http *http.Client
	log  []exchange
}

type exchange struct {
	method, path string
	status       int
	hdr          http.Header
	body         []byte
}

func (cc *contractClient) do(method, target, body string, hdr ...string) exchange {
	cc.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, cc.url+target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := cc.http.Do(req)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	ex := exchange{method, req.URL.Path, res.StatusCode, res.Header, b}
	if err := cc.c.check(method, req.URL.Path, res.StatusCode, res.Header, b); err != nil {
		cc.t.Error(err)
	}
	cc.log = append(cc.log, ex)
	return ex
}

func (cc *contractClient) state(id string) string {
	var info struct{ State string }
	json.Unmarshal(cc.do("GET", "/v1/sandboxes/"+id, "").body, &info)
	return info.State
}

// runScenario drives every route of the running daemon.
func runScenario(t *testing.T, cc *contractClient) {
	// Watch events from the start; every frame is checked.
	evReq, _ := http.NewRequest("GET", cc.url+"/v1/events?label.suite=contract", nil)
	evResp, err := cc.http.Do(evReq)
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	if err := cc.c.check("GET", "/v1/events", evResp.StatusCode, evResp.Header, nil); err != nil {
		t.Error(err)
	}
	frames := make(chan []byte, 100)
	go func() {
		defer close(frames)
		er := client.NewEventReader(evResp.Body)
		for {
			ev, err := er.Next()
			if err != nil {
				return
			}
			frames <- ev.Data
		}
	}()

	cc.do("GET", "/v1/info", "")
	cc.do("GET", "/v1/info", "", "Origin", "https://evil.example")
	cc.do("GET", "/v1/openapi.yaml", "")
	cc.do("POST", "/v1/sandboxes", `{"name":"k1","labels":{"suite":"contract","harnessSessionId":"h-1"},"envVars":{"A":"1"},"autoDeleteInterval":-1,"cpu":2}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k2","labels":{"suite":"contract"},"autoStopInterval":0,"autoDeleteInterval":0}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k1"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"../k"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k3"}`, "Content-Type", "text/plain")
	testenv.Eventually(t, "k1 started", func() bool { return cc.state("k1") == "started" })
	testenv.Eventually(t, "k2 started", func() bool { return cc.state("k2") == "started" })
	cc.do("GET", "/v1/sandboxes", "")
	cc.do("GET", "/v1/sandboxes?label.suite=contract", "")
	cc.do("GET", `/v1/sandboxes?labels={"suite":"contract"}`, "")
	cc.do("GET", "/v1/sandboxes?labels=nope", "")
	cc.do("GET", "/v1/sandboxes/k1", "")
	cc.do("GET", "/v1/sandboxes/missing", "")
	cc.do("POST", "/v1/sandboxes/k1/refresh-activity", "")
	cc.do("POST", "/v1/sandboxes/missing/refresh-activity", "")
	cc.do("POST", "/v1/sandboxes/k1/autostop", `{"interval":20}`)
	cc.do("POST", "/v1/sandboxes/k1/autostop", `{"interval":-3}`)
	cc.do("POST", "/v1/sandboxes/missing/autostop", `{"interval":1}`)
	cc.do("POST", "/v1/sandboxes/k1/autostop/0", "")
	cc.do("POST", "/v1/sandboxes/k1/autostop/x", "")
	cc.do("POST", "/v1/sandboxes/missing/autostop/1", "")
	cc.do("POST", "/v1/sandboxes/k1/resize", `{"cpu":4}`)
	cc.do("POST", "/v1/sandboxes/missing/resize", "")
	cc.do("GET", "/v1/sandboxes/k1/preview-url?port=4000&ttl=60", "")
	cc.do("GET", "/v1/sandboxes/k1/preview-url?port=22", "")
	cc.do("GET", "/v1/sandboxes/missing/preview-url", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?tailBytes=0", "")
	cc.do("GET", "/v1/sandboxes/missing/entrypoint-logs", "")
	cc.do("POST", "/v1/sandboxes/k1/start", "")
	cc.do("POST", "/v1/sandboxes/missing/start", "")
	cc.do("POST", "/v1/sandboxes/k1/stop?force=nah", "")
	cc.do("POST", "/v1/sandboxes/missing/stop", "")
	cc.do("POST", "/v1/sandboxes/k1/stop", "")
	cc.do("POST", "/v1/sandboxes/k2/stop?force=true", "") // auto-delete 0: answers destroyed
	cc.do("POST", "/v1/sandboxes/k1/refresh-activity", "")
	cc.do("POST", "/v1/sandboxes/k1/autostop", `{"interval":5}`)
	cc.do("POST", "/v1/sandboxes/k1/autostop/5", "")
	cc.do("GET", "/v1/sandboxes/k1/preview-url", "")
	cc.do("GET", "/v1/events?labels=nope", "")
	cc.do("DELETE", "/v1/sandboxes/k1", "")
	cc.do("DELETE", "/v1/sandboxes/k1", "")

	// The feed saw created, started, stopped and deleted; each frame
	// matches StreamEvent.
	want := map[string]bool{"sandboxes_replaced": false, "sandbox.created": false, "sandbox.started": false, "sandbox.stopped": false, "sandbox.deleted": false}
	deadline := time.After(60 * time.Second)
	for slices.Contains(mapValues(want), false) {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("event stream ended")
			}
			if err := cc.c.validate("/components/schemas/StreamEvent", f); err != nil {
				t.Error(err)
			}
			var ev struct{ Type string }
			json.Unmarshal(f, &ev)
			want[ev.Type] = true
		case <-deadline:
			t.Fatalf("event types seen: %v", want)
		}
	}
	// Every route but info refuses a wrong token, as documented.
	for _, rt := range routes {
		if rt.path != "/v1/info" {
			path := strings.NewReplacer("{id}", "wt-1", "{interval}", "5").Replace(rt.path)
			if ex := cc.do(rt.method, path, "", "Authorization", "Bearer wrong-token-0123456789"); ex.status != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong token: %d", rt.method, rt.path, ex.status)
			}
		}
	}
}

func mapValues(m map[string]bool) []bool {
	var out []bool
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

var contractPorts = testenv.PortBlock{Base: 29600, Size: 20}

func TestOpenAPIConformance(t *testing.T) {
	c := loadContract(t, OpenAPI, nil)
	lo, hi := contractPorts.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi})
	cc := &contractClient{t: t, c: c, url: d.URL, http: d.HTTP(0)}
	runScenario(t, cc)
	t.Logf("%d exchanges checked, %d (operation, status) pairs seen", len(cc.log), len(c.seen))

	// Every documented operation was exercised with every documented
	// status, except server failures (500, 503), which no scenario can
	// provoke on demand, and the browser guard's 403, which is the same
	// middleware on every route and is provoked once.
	for tpl, item := range c.doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			for code := range op.(map[string]any)["responses"].(map[string]any) {
				key := strings.ToUpper(method) + " " + tpl + " " + code
				skip := code == "500" || code == "503" || code == "403" && tpl != "/v1/info"
				if !skip && !c.seen[key] {
					t.Errorf("documented but never exercised: %s", key)
				}
			}
		}
	}
	// The document and the route table name the same operations.
	var docOps, codeOps []string
	for tpl, item := range c.doc["paths"].(map[string]any) {
		for method := range item.(map[string]any) {
			if method != "parameters" {
				docOps = append(docOps, strings.ToUpper(method)+" "+tpl)
			}
		}
	}
	for _, rt := range routes {
		codeOps = append(codeOps, rt.method+" "+rt.path)
	}
	slices.Sort(docOps)
	slices.Sort(codeOps)
	if !slices.Equal(docOps, codeOps) {
		t.Errorf("document operations %v\nroute table %v", docOps, codeOps)
	}

	// The check can fail: a wrong copy of a schema, and a drifted answer,
	// are both caught.
	var created exchange
	for _, ex := range cc.log {
		if ex.method == "POST" && ex.path == "/v1/sandboxes" && ex.status == 201 {
			created = ex
			break
		}
	}
	wrong := loadContract(t, OpenAPI, func(doc map[string]any) {
		props := doc["components"].(map[string]any)["schemas"].(map[string]any)["SandboxInfo"].(map[string]any)["properties"].(map[string]any)
		props["port"] = map[string]any{"type": "string"}
	})
	if err := wrong.check("POST", "/v1/sandboxes", 201, created.hdr, created.body); err == nil {
		t.Error("a wrong schema for SandboxInfo.port passed")
	}
	drifted := bytes.Replace(created.body, []byte(`"state":`), []byte(`"status":"x","state":`), 1)
	if err := c.check("POST", "/v1/sandboxes", 201, created.hdr, drifted); err == nil {
		t.Error("an answer with an undocumented field passed")
	}
	if err := c.check("POST", "/v1/sandboxes", 202, created.hdr, created.body); err == nil {
		t.Error("an undocumented status passed")
	}
}
