package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"go.yaml.in/yaml/v3"
)

// daytonaErrorSchema is the body of Daytona's errors (NestJS's), which its
// document does not write down: its SDKs read message.
const daytonaErrorSchema = `{"type":"object","additionalProperties":false,
 "required":["statusCode","error","message","path","timestamp"],
 "properties":{"statusCode":{"type":"integer","minimum":400,"maximum":599},"error":{"type":"string","minLength":1},
  "message":{"type":"string","minLength":1},"path":{"type":"string","pattern":"^/"},"timestamp":{"type":"string","format":"date-time"}}}`

// daytonaChecker validates every exchange of a client with the daemon's
// /api against Daytona's document, with an OpenAPI implementation the
// daemon does not use (pb33f/libopenapi): the request always, the answer
// and its status where the document has them; an error status the
// document does not list (it lists none) must be Daytona's error shape.
type daytonaChecker struct {
	t    *testing.T
	v    validator.Validator
	doc  *libopenapi.DocumentModel[v3.Document]
	errs *errorSchema
	next http.RoundTripper

	vmu  *sync.Mutex // held while validating: shared by the checkers of one document
	mu   sync.Mutex
	seen map[string]bool // "operationId status"
	n    int
}

func newDaytonaChecker(t *testing.T) *daytonaChecker { return newChecker(t, daytonaDoc, "/api") }

// newChecker checks exchanges against doc, its paths under server.
func newChecker(t *testing.T, file, server string) *daytonaChecker {
	p := parseDoc(file, server)
	if p.err != nil {
		t.Fatal(p.err)
	}
	return &daytonaChecker{t: t, v: p.v, doc: p.doc, vmu: &p.mu, errs: newErrorSchema(t), next: http.DefaultTransport, seen: map[string]bool{}}
}

// parsedDoc is a document read and its validator built, once per test
// binary (under the race detector that takes seconds each time).
type parsedDoc struct {
	once sync.Once
	v    validator.Validator
	doc  *libopenapi.DocumentModel[v3.Document]
	mu   sync.Mutex // the validator is not safe for concurrent use
	err  error
}

var parsedDocs sync.Map // file+" "+server → *parsedDoc

func parseDoc(file, server string) *parsedDoc {
	x, _ := parsedDocs.LoadOrStore(file+" "+server, &parsedDoc{})
	p := x.(*parsedDoc)
	p.once.Do(func() { p.v, p.doc, p.err = buildValidator(file, server) })
	return p
}

func buildValidator(file, server string) (validator.Validator, *libopenapi.DocumentModel[v3.Document], error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	// Daytona's clients are given http://HOST:PORT/api (and the
	// toolbox's base, toolboxProxyUrl/{id}): the document's paths are
	// under it.
	var y map[string]any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		return nil, nil, err
	}
	y["servers"] = []any{map[string]any{"url": server}}
	if raw, err = yaml.Marshal(y); err != nil {
		return nil, nil, err
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		return nil, nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s: %v", file, errs)
	}
	m, err := doc.BuildV3Model()
	return v, m, err
}

func (c *daytonaChecker) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err := c.check(req, reqBody, res, body); err != nil {
		c.t.Error(err)
	}
	return res, nil
}

func (c *daytonaChecker) check(req *http.Request, reqBody []byte, res *http.Response, body []byte) error {
	// The validator is not safe for concurrent use: exchanges that run
	// at once (a bound pushed past) are checked one at a time.
	c.vmu.Lock()
	defer c.vmu.Unlock()
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	pi, errs, tpl := paths.FindPath(req, &c.doc.Model, config.NewValidationOptions())
	if pi == nil {
		return fmt.Errorf("%s %s: not in Daytona's document:%s", req.Method, req.URL.Path, describe(errs))
	}
	op := pi.GetOperations().GetOrZero(strings.ToLower(req.Method))
	if op == nil {
		return fmt.Errorf("%s %s: no such operation in Daytona's document", req.Method, tpl)
	}
	again := req.Clone(req.Context())
	again.Body = io.NopCloser(bytes.NewReader(reqBody))
	if ok, errs := c.v.ValidateHttpRequest(again); !ok {
		return fmt.Errorf("%s %s: the request does not match Daytona's document:%s", req.Method, req.URL, describe(errs))
	}
	code := strconv.Itoa(res.StatusCode)
	c.mu.Lock()
	c.seen[op.OperationId+" "+code] = true
	c.mu.Unlock()
	if op.Responses.Codes.GetOrZero(code) == nil {
		if res.StatusCode < 400 {
			return fmt.Errorf("%s %s: status %d is not Daytona's (%s)", req.Method, tpl, res.StatusCode, body)
		}
		return c.errs.check(body)
	}
	res2 := &http.Response{StatusCode: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	if ok, errs := c.v.ValidateHttpResponse(req, res2); !ok {
		return fmt.Errorf("%s %s %d: the answer does not match Daytona's document:%s\n%s", req.Method, tpl, res.StatusCode, describe(errs), body)
	}
	return nil
}

// errorSchema validates Daytona's error body with the same library.
type errorSchema struct {
	doc *libopenapi.DocumentModel[v3.Document]
}

func newErrorSchema(t *testing.T) *errorSchema {
	doc, err := libopenapi.NewDocument([]byte(`{"openapi":"3.1.0","info":{"title":"errors","version":"1"},"paths":{},
		"components":{"schemas":{"Error":` + daytonaErrorSchema + `}}}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	return &errorSchema{doc: m}
}

func (e *errorSchema) check(body []byte) error {
	s := e.doc.Model.Components.Schemas.GetOrZero("Error").Schema()
	if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(s, body); !ok {
		return fmt.Errorf("an error answer is not Daytona's error shape:%s\n%s", describe(errs), body)
	}
	return nil
}
