// This file is long because its scenario is driven by two clients and
// checked against the OpenAPI document, all declared here.

package tests

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"go.yaml.in/yaml/v3"

	"github.com/agent-control-plane/agent-control-plane/api"
	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// contract checks real exchanges against api/openapi.yaml with an
// independent OpenAPI 3.1 implementation (pb33f/libopenapi and its
// validator): the document is validated as a whole, requests are routed
// and answers validated by the library; this file only keeps count.
type contract struct {
	raw   []byte
	model *v3.Document
	v     validator.Validator
	opts  *config.ValidationOptions
	seen  map[string]bool // "METHOD template status"
}

func loadContract(t *testing.T, raw []byte, mutate func(map[string]any)) *contract {
	t.Helper()
	if mutate != nil {
		var y map[string]any
		if err := yaml.Unmarshal(raw, &y); err != nil {
			t.Fatal(err)
		}
		mutate(y)
		var err error
		if raw, err = yaml.Marshal(y); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if doc.GetVersion() != "3.1.0" {
		t.Fatalf("openapi version %q", doc.GetVersion())
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("openapi.yaml: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("openapi.yaml is not a valid OpenAPI 3.1 document: %s", describe(verrs))
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	return &contract{raw: raw, model: &m.Model, v: v, opts: config.NewValidationOptions(), seen: map[string]bool{}}
}

func describe(errs []*liberrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    %s %s", se.FieldPath, se.Reason)
		}
	}
	return b.String()
}

// schema returns a schema of components/schemas by name.
func (c *contract) schema(name string) *base.Schema {
	return c.model.Components.Schemas.GetOrZero(name).Schema()
}

// validate checks a JSON value against a named component schema.
func (c *contract) validate(name string, body []byte) error {
	if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(c.schema(name), body); !ok {
		return fmt.Errorf("does not match %s:%s\n%s", name, describe(errs), body)
	}
	return nil
}

// check validates one real exchange: the answer always (status, headers,
// body), the request whenever the daemon accepted it. reqBody is the body
// the request was sent with.
func (c *contract) check(req *http.Request, reqBody []byte, status int, hdr http.Header, body []byte) error {
	pi, errs, tpl := paths.FindPath(req, c.model, c.opts)
	if pi == nil {
		return fmt.Errorf("%s %s: path not in the document:%s", req.Method, req.URL.Path, describe(errs))
	}
	op := pi.GetOperations().GetOrZero(strings.ToLower(req.Method))
	code := strconv.Itoa(status)
	if op == nil {
		// Methods a path does not list: components/responses/MethodNotAllowed.
		if status != http.StatusMethodNotAllowed || hdr.Get("Allow") == "" {
			return fmt.Errorf("%s %s: operation not in the document, answered %d", req.Method, tpl, status)
		}
		c.seen["* "+tpl+" 405"] = true
		return c.validate("Error", body)
	}
	if op.Responses.Codes.GetOrZero(code) == nil {
		return fmt.Errorf("%s %s: status %d not documented (body %s)", req.Method, tpl, status, body)
	}
	c.seen[req.Method+" "+tpl+" "+code] = true
	if mt, _, _ := mime.ParseMediaType(hdr.Get("Content-Type")); mt == "text/event-stream" {
		return nil // a stream: its frames are checked one by one
	}
	res := &http.Response{StatusCode: status, Header: hdr, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	if ok, errs := c.v.ValidateHttpResponse(req, res); !ok {
		return fmt.Errorf("%s %s %d: the answer does not match the document:%s\n%s", req.Method, tpl, status, describe(errs), body)
	}
	// Both ways: what the daemon accepts the document allows, and what it
	// refuses as invalid the document refuses too.
	again := req.Clone(req.Context())
	again.Body = io.NopCloser(bytes.NewReader(reqBody))
	ok, errs := c.v.ValidateHttpRequest(again)
	switch {
	case status/100 == 2 && !ok:
		return fmt.Errorf("%s %s: the daemon accepted a request the document refuses:%s", req.Method, req.URL, describe(errs))
	case status == http.StatusBadRequest && ok && !dependsOnDaemon(body):
		return fmt.Errorf("%s %s %s: the daemon refused a request the document allows: %s", req.Method, req.URL, reqBody, body)
	}
	return nil
}

// dependsOnDaemon: a 400 that no document can foresee, because it
// depends on this daemon's configuration or machine (a snapshot it does
// not have, an image not here, a limit it cannot enforce).
func dependsOnDaemon(body []byte) bool {
	var eb struct{ Error struct{ Code string } }
	json.Unmarshal(body, &eb)
	return slices.Contains([]string{"unknown_snapshot", "image_not_found", "limits_unsupported", "program_not_found", "path_outside"}, eb.Error.Code)
}

// client records and checks every exchange with the daemon.
type contractClient struct {
	t     *testing.T
	c     *contract
	url   string
	token string
	d     *testenv.Daemon
	log   []exchange
}

// contractMaxUpload is the contract daemon's max_upload_bytes.
const contractMaxUpload = 4096

type exchange struct {
	req     *http.Request
	reqBody []byte
	status  int
	hdr     http.Header
	body    []byte
}

// runArchives exercises the archive routes: a tar out and in, and each
// way in is refused.
func runArchives(cc *contractClient) {
	tarType := []string{"Content-Type", "application/x-tar"}
	cc.do("GET", "/v1/sandboxes/k1/archive?path=notes.txt", "")
	cc.do("GET", "/v1/sandboxes/k1/archive?path=nope", "")
	cc.do("GET", "/v1/sandboxes/k1/archive", "")
	cc.do("GET", "/v1/sandboxes/missing/archive?path=x", "")
	cc.do("PUT", "/v1/sandboxes/k1/archive?path=from-tar", tarFile("d/a.txt", "hello"), tarType...)
	cc.do("PUT", "/v1/sandboxes/k1/archive?path=from-tar", tarFile("../escape", "x"), tarType...)
	cc.do("PUT", "/v1/sandboxes/k1/archive?path=from-tar", tarFile("big", strings.Repeat("x", contractMaxUpload+1)), tarType...)
	cc.do("PUT", "/v1/sandboxes/k1/archive?path=from-tar", "as JSON")
	cc.do("PUT", "/v1/sandboxes/k1/archive?path=/etc", tarFile("a", "x"), tarType...)
	cc.do("PUT", "/v1/sandboxes/missing/archive?path=x", tarFile("a", "x"), tarType...)
}

// tarFile is a tar holding one file.
func tarFile(name, content string) string {
	var b strings.Builder
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write([]byte(content))
	tw.Close()
	return b.String()
}

func (cc *contractClient) do(method, target, body string, hdr ...string) exchange {
	cc.t.Helper()
	req, _ := http.NewRequest(method, cc.url+target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+cc.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer res.Body.Close()
	var b []byte
	if res.StatusCode != http.StatusSwitchingProtocols { // a WebSocket's frames are no document answer
		b, _ = io.ReadAll(res.Body)
	}
	ex := exchange{req, []byte(body), res.StatusCode, res.Header, b}
	if err := cc.c.check(req, []byte(body), res.StatusCode, res.Header, b); err != nil {
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

// wsHandshake are the headers that ask to switch to a WebSocket.
var wsHandshake = []string{"Upgrade", "websocket", "Connection", "Upgrade", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}

// runTerminals drives the terminals of running sandbox k1: one attached
// to its end, the bounds, the refusals.
func runTerminals(cc *contractClient) {
	var term struct{ ID string }
	json.Unmarshal(cc.do("POST", "/v1/sandboxes/k1/terminals", `{"argv":["sh","-c","echo hi"],"cols":90,"rows":20}`).body, &term)
	cc.do("GET", "/v1/sandboxes/k1/terminals/"+term.ID+"/attach", "", wsHandshake...)
	cc.do("GET", "/v1/sandboxes/k1/terminals/nope/attach", "", wsHandshake...)
	cc.do("POST", "/v1/sandboxes/k1/terminals", `{"argv":[]}`)
	cc.do("POST", "/v1/sandboxes/k1/terminals", `{}`, "Content-Type", "text/plain")
	cc.do("POST", "/v1/sandboxes/missing/terminals", `{}`)
	var ids []string
	for range supervisor.MaxTerminalsPerSandbox + 1 { // the last is one too many (the ended one made room)
		var t struct{ ID string }
		json.Unmarshal(cc.do("POST", "/v1/sandboxes/k1/terminals", `{}`).body, &t)
		ids = append(ids, t.ID)
	}
	for _, id := range ids[:supervisor.MaxTerminalsPerSandbox] {
		cc.do("DELETE", "/v1/sandboxes/k1/terminals/"+id, "")
	}
	cc.do("DELETE", "/v1/sandboxes/k1/terminals/"+ids[0], "")
}

// runScenario drives every route of the running daemon.
//
// It is long because it is the one scenario the generated client and the
// hand-written one both drive, step by step, each on the sandbox the one
// before left.
func runScenario(t *testing.T, cc *contractClient) {
	// Watch events from the start; every frame is checked.
	evReq, _ := http.NewRequest("GET", cc.url+"/v1/events?label=suite%3Dcontract", nil)
	evReq.Header.Set("Authorization", "Bearer "+cc.token)
	evResp, err := http.DefaultClient.Do(evReq)
	if err != nil {
		t.Fatal(err)
	}
	defer evResp.Body.Close()
	if err := cc.c.check(evReq, nil, evResp.StatusCode, evResp.Header, nil); err != nil {
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
	// The dashboard's sign-in: a code, traded once for a session.
	var link struct{ Code string }
	json.Unmarshal(cc.do("POST", "/v1/dashboard/links", "").body, &link)
	redeem := `{"code":"` + link.Code + `"}`
	cc.do("POST", "/v1/dashboard/sessions", redeem, "Authorization", "", "Origin", "http://127.0.0.1:1")
	var sess struct{ ID, Secret string }
	json.Unmarshal(cc.do("POST", "/v1/dashboard/sessions", redeem, "Authorization", "").body, &sess)
	cc.do("POST", "/v1/dashboard/sessions", redeem, "Authorization", "")
	cc.do("POST", "/v1/dashboard/sessions", `{"code":1}`, "Authorization", "")
	cc.do("POST", "/v1/dashboard/sessions", redeem, "Authorization", "", "Content-Type", "text/plain")
	cc.do("GET", "/v1/dashboard/sessions", "", "Authorization", "Bearer "+sess.Secret)
	cc.do("POST", "/v1/dashboard/links", "", "Authorization", "Bearer "+sess.Secret)
	cc.do("DELETE", "/v1/dashboard/sessions/"+sess.ID, "")
	cc.do("DELETE", "/v1/dashboard/sessions/"+sess.ID, "")
	cc.do("DELETE", "/v1/dashboard/sessions", "")
	for i := 0; i <= 16; i++ { // the 17th waiting code is refused
		cc.do("POST", "/v1/dashboard/links", "")
	}
	cc.do("DELETE", "/v1/dashboard/sessions", "") // voids the waiting codes too
	cc.do("GET", "/v1/openapi.yaml", "")
	cc.do("GET", "/v1/snapshots", "")
	cc.do("POST", "/v1/sandboxes", `{"name":"k5","snapshot":"no-such-snapshot"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k1","labels":{"suite":"contract","harnessSessionId":"h-1"},"envVars":{"A":"1"},"autoDeleteInterval":-1,"cpu":0,"gpu":0}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k6","gpu":1,"networkBlockAll":true}`) // refused, named: never dropped
	cc.do("POST", "/v1/sandboxes", `{"name":"k2","labels":{"suite":"contract"},"autoStopInterval":0,"autoDeleteInterval":0}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k1"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"../k"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k4","autoDeleteInterval":-2}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k4","autoStopInterval":1e9}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k4","colour":"blue"}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k4","labels":{"a":1}}`)
	cc.do("POST", "/v1/sandboxes", `{"name":"k3"}`, "Content-Type", "text/plain")
	testenv.Eventually(t, "k1 started", func() bool { return cc.state("k1") == "started" })
	testenv.Eventually(t, "k2 started", func() bool { return cc.state("k2") == "started" })
	cc.do("GET", "/v1/sandboxes", "")
	cc.do("GET", "/v1/sandboxes?label.suite=contract", "")
	cc.do("GET", `/v1/sandboxes?labels={"suite":"contract"}`, "")
	cc.do("GET", "/v1/sandboxes?labels=nope", "")
	cc.do("GET", "/v1/sandboxes?label=suite%3Dcontract&states=started,stopped&limit=1", "")
	cc.do("GET", "/v1/sandboxes?states=running", "")
	cc.do("PUT", "/v1/sandboxes", "")
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
	// Limits of 0 hold with or without cgroups (the cgroup tests set real
	// ones).
	cc.do("POST", "/v1/sandboxes/k1/resize", `{"cpu":0,"memory":0,"disk":0}`)
	cc.do("POST", "/v1/sandboxes/k1/resize", `{"disk":3}`) // no disk bound here: refused, named
	cc.do("POST", "/v1/sandboxes/k1/resize", `{"pids":-1}`)
	cc.do("POST", "/v1/sandboxes/missing/resize", `{"cpu":1}`)
	cc.do("GET", "/v1/sandboxes/k1/preview-url?port=4000&ttl=60", "")
	cc.do("GET", "/v1/sandboxes/k1/preview-url?port=22", "")
	cc.do("GET", "/v1/sandboxes/missing/preview-url", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?tailBytes=0", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?tail=5&since=10m&stream=stdout&timestamps=true", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?since=2026-01-01T00:00:00Z&stream=stderr", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?since=yesterday", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?tail=0", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?tailBytes=1&until=1s", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?all=true&since=1h&until=2026-01-01", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?all=true&tail=5", "")
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?follow=true&until=1s", "")
	// The toolbox.
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["sh","-c","echo $A; cat; echo e >&2; exit 2"],"stdin":"in\n","env":{"B":"2"},"timeoutMs":30000}`)
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["no-such-program-anywhere"]}`)
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":[]}`)
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["true"]}`, "Content-Type", "text/plain")
	cc.do("POST", "/v1/sandboxes/missing/exec", `{"argv":["true"]}`)
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["sh","-c","echo out; echo err >&2; exit 3"]}`, "Accept", "text/event-stream")
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=notes.txt&mode=0600", "some notes", "Content-Type", "application/octet-stream")
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=notes.txt", "as JSON") // JSON is not a file's bytes: 415
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=../escape", "x", "Content-Type", "application/octet-stream")
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=no/such/dir/f", "x", "Content-Type", "application/octet-stream")
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=big", strings.Repeat("x", contractMaxUpload+1), "Content-Type", "application/octet-stream")
	cc.do("PUT", "/v1/sandboxes/missing/files/content?path=f", "x", "Content-Type", "application/octet-stream")
	cc.do("GET", "/v1/sandboxes/k1/files", "")
	cc.do("GET", "/v1/sandboxes/k1/files?path=/etc", "")
	cc.do("GET", "/v1/sandboxes/k1/files?path=nope", "")
	cc.do("GET", "/v1/sandboxes/missing/files", "")
	cc.do("GET", "/v1/sandboxes/k1/files/content?path=notes.txt", "")
	cc.do("GET", "/v1/sandboxes/k1/files/content?path=/etc/passwd", "")
	cc.do("GET", "/v1/sandboxes/k1/files/content?path=nope.txt", "")
	cc.do("GET", "/v1/sandboxes/missing/files/content?path=x", "")
	cc.do("GET", "/v1/sandboxes/k1/files/stat?path=notes.txt", "")
	cc.do("GET", "/v1/sandboxes/k1/files/stat?path=nope", "")
	cc.do("GET", "/v1/sandboxes/k1/files/stat", "")
	cc.do("GET", "/v1/sandboxes/missing/files/stat?path=x", "")
	runArchives(cc)
	cc.do("POST", "/v1/sandboxes/k1/sessions", `{"name":"work"}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions", `{"name":"work"}`) // the name is in use
	cc.do("POST", "/v1/sandboxes/k1/sessions", `{"name":"../x"}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions", `{"name":"x"}`, "Content-Type", "text/plain")
	cc.do("POST", "/v1/sandboxes/missing/sessions", `{"name":"x"}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions/work/exec", `{"command":"cd /tmp && export X=1"}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions/work/exec", `{"command":"pwd; echo $X"}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions/work/exec", `{"command":" "}`)
	cc.do("POST", "/v1/sandboxes/k1/sessions/work/exec", `{}`, "Content-Type", "text/plain")
	cc.do("POST", "/v1/sandboxes/k1/sessions/nope/exec", `{"command":"true"}`)
	runTerminals(cc)
	for i := 1; i <= supervisor.MaxSessionsPerSandbox; i++ { // the last is one too many
		cc.do("POST", "/v1/sandboxes/k1/sessions", fmt.Sprintf(`{"name":"s%d"}`, i))
	}
	for i := 1; i <= supervisor.MaxSessionsPerSandbox; i++ {
		cc.do("DELETE", fmt.Sprintf("/v1/sandboxes/k1/sessions/s%d", i), "")
	}
	cc.do("DELETE", "/v1/sandboxes/k1/sessions/work", "")
	cc.do("DELETE", "/v1/sandboxes/k1/sessions/work", "")
	// Blockers fill the bound: each retries while it is refused (a
	// probe below may hold a slot for a moment); they end when their
	// client leaves, which kills their command.
	bctx, cancelBlockers := context.WithCancel(context.Background())
	var blockers sync.WaitGroup
	for range supervisor.MaxExecsPerSandbox {
		blockers.Go(func() {
			for bctx.Err() == nil {
				req, _ := http.NewRequestWithContext(bctx, "POST", cc.url+"/v1/sandboxes/k1/exec", strings.NewReader(`{"argv":["sleep","300"]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+cc.token)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				res.Body.Close()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	testenv.Eventually(t, "the toolbox is full", func() bool {
		return cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["true"]}`).status == 429
	})
	cancelBlockers()
	blockers.Wait()
	testenv.Eventually(t, "the toolbox has room again", func() bool {
		return cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["true"]}`).status == 200
	})
	cc.do("GET", "/v1/sandboxes/missing/entrypoint-logs", "")
	cc.do("POST", "/v1/sandboxes/k1/start", "")
	cc.do("POST", "/v1/sandboxes/missing/start", "")
	cc.do("POST", "/v1/sandboxes/k1/stop?force=nah", "")
	cc.do("POST", "/v1/sandboxes/missing/stop", "")
	cc.do("POST", "/v1/sandboxes/k1/stop", "")
	cc.do("POST", "/v1/sandboxes/k1/start", "") // again, in place
	cc.do("POST", "/v1/sandboxes/k1/stop", "")
	cc.do("POST", "/v1/sandboxes/k2/stop?force=true", "")            // auto-delete 0: answers destroyed
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?follow=true", "") // stopped: its tail, then the end
	cc.do("GET", "/v1/sandboxes/k1/entrypoint-logs?follow=maybe", "")
	cc.do("POST", "/v1/sandboxes/k1/refresh-activity", "")
	cc.do("POST", "/v1/sandboxes/k1/exec", `{"argv":["true"]}`)
	cc.do("GET", "/v1/sandboxes/k1/files", "")
	cc.do("GET", "/v1/sandboxes/k1/files/content?path=notes.txt", "")
	cc.do("PUT", "/v1/sandboxes/k1/files/content?path=notes.txt", "x", "Content-Type", "application/octet-stream")
	cc.do("POST", "/v1/sandboxes/k1/sessions", `{"name":"late"}`)
	cc.do("POST", "/v1/sandboxes/k1/terminals", `{}`)
	cc.do("DELETE", "/v1/sandboxes/k1/terminals/t1", "")
	cc.do("GET", "/v1/sandboxes/k1/terminals/t1/attach", "", wsHandshake...)
	cc.do("POST", "/v1/sandboxes/k1/autostop", `{"interval":5}`)
	cc.do("POST", "/v1/sandboxes/k1/autostop/5", "")
	cc.do("POST", "/v1/sandboxes/k1/resize", `{"cpu":1}`)
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
			if err := cc.c.validate("StreamEvent", f); err != nil {
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
	for _, rt := range api.Routes() {
		if !rt.Open {
			path := strings.NewReplacer("{id}", "wt-1", "{interval}", "5").Replace(rt.Path)
			if ex := cc.do(rt.Method, path, "", "Authorization", "Bearer wrong-token-0123456789"); ex.status != http.StatusUnauthorized {
				t.Errorf("%s %s with a wrong token: %d", rt.Method, rt.Path, ex.status)
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

// TestOpenAPIConformance is long because it sets up the validator and
// the recorded traffic it checks in one place.
func TestOpenAPIConformance(t *testing.T) {
	c := loadContract(t, api.OpenAPI, nil)
	lo, hi := contractPorts.Next()
	snapshots := "[snapshots.brief]\ncommand = [\"" + testenv.Binary(t) + "\", \"stub-agent\"]\n"
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: snapshots,
		Env: []string{"AGENT_CONTROL_PLANE_MAX_UPLOAD_BYTES=" + strconv.Itoa(contractMaxUpload)}})
	cc := &contractClient{t: t, c: c, url: d.URL, token: d.Token, d: d}
	runScenario(t, cc)
	// A sandbox whose snapshot left the configuration cannot start again:
	// 400 unknown_snapshot, and it stays stopped.
	cc.do("POST", "/v1/sandboxes", `{"name":"brief1","snapshot":"brief"}`)
	cc.do("POST", "/v1/sandboxes/brief1/stop", "")
	if err := os.WriteFile(filepath.Join(d.ConfigHome, "agent-control-plane", "config.toml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	testenv.Eventually(t, "the snapshot is gone after SIGHUP", func() bool {
		_, b := call(t, d, "GET", "/v1/snapshots", "")
		return !strings.Contains(string(b), `"brief"`)
	})
	cc.do("POST", "/v1/sandboxes/brief1/start", "")
	t.Logf("%d exchanges checked, %d (operation, status) pairs seen", len(cc.log), len(c.seen))

	// Every documented operation was exercised with every documented
	// status, except server failures (500, 503), which no scenario can
	// provoke on demand, and the browser guard's 403, which is the same
	// middleware on every route and is provoked once.
	var docOps []string
	for tpl, pi := range c.model.Paths.PathItems.FromOldest() {
		for method, op := range pi.GetOperations().FromOldest() {
			docOps = append(docOps, strings.ToUpper(method)+" "+tpl)
			for code := range op.Responses.Codes.KeysFromOldest() {
				key := strings.ToUpper(method) + " " + tpl + " " + code
				skip := code == "500" || code == "503" || code == "403" && tpl != "/v1/info"
				if !skip && !c.seen[key] {
					t.Errorf("documented but never exercised: %s", key)
				}
			}
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(c.seen)), func(k string) bool { return strings.HasSuffix(k, " 405") }) {
		t.Error("405 documented (components/responses/MethodNotAllowed) but never exercised")
	}
	// The document and the route table name the same operations.
	var codeOps []string
	for _, rt := range api.Routes() {
		codeOps = append(codeOps, rt.Method+" "+rt.Path)
	}
	slices.Sort(docOps)
	slices.Sort(codeOps)
	if !slices.Equal(docOps, codeOps) {
		t.Errorf("document operations %v\nroute table %v", docOps, codeOps)
	}

	// The check can fail: a wrong copy of a schema, a drifted answer, an
	// undocumented status and a request the document refuses are caught.
	var created exchange
	for _, ex := range cc.log {
		if ex.req.Method == "POST" && ex.req.URL.Path == "/v1/sandboxes" && ex.status == 201 {
			created = ex
			break
		}
	}
	wrong := loadContract(t, api.OpenAPI, func(doc map[string]any) {
		props := doc["components"].(map[string]any)["schemas"].(map[string]any)["SandboxInfo"].(map[string]any)["properties"].(map[string]any)
		props["port"] = map[string]any{"type": "string"}
	})
	if err := wrong.check(created.req, created.reqBody, 201, created.hdr, created.body); err == nil {
		t.Error("a wrong schema for SandboxInfo.port passed")
	}
	drifted := bytes.Replace(created.body, []byte(`"state":`), []byte(`"status":"x","state":`), 1)
	if err := c.check(created.req, created.reqBody, 201, created.hdr, drifted); err == nil {
		t.Error("an answer with an undocumented field passed")
	}
	if err := c.check(created.req, created.reqBody, 202, created.hdr, created.body); err == nil {
		t.Error("an undocumented status passed")
	}
	if err := c.check(created.req, []byte(`{"name":"x","autoDeleteInterval":-2}`), 201, created.hdr, created.body); err == nil {
		t.Error("a request with autoDeleteInterval -2 passed")
	}
}
