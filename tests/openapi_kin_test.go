package tests

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agent-control-plane/agent-control-plane/api"
)

// kinValidate checks a document with a second, independent OpenAPI
// implementation (getkin/kin-openapi): one validator's leniency hid an
// invalid document before (a flow mapping that made half a description a
// property, which libopenapi accepted).
func kinValidate(raw []byte) error {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return err
	}
	return doc.Validate(context.Background())
}

func TestOpenAPIValidWithKin(t *testing.T) {
	if err := kinValidate(api.OpenAPI); err != nil {
		t.Fatalf("api/openapi.yaml: kin-openapi: %v", err)
	}
	// The check can fail: the bug it was added for is caught.
	broken := []byte(`openapi: 3.1.0
info: {title: t, version: "1"}
paths: {}
components:
  schemas:
    S:
      type: object
      properties:
        memory: {type: number, description: Memory limit in force, GiB; absent none.}
`)
	if err := kinValidate(broken); err == nil {
		t.Error("kin-openapi accepted a property that is half a description")
	}
}
