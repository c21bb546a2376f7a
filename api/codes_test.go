package api

import (
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The error codes the daemon declares are the ones its published document
// lists: the same set, each once.
func TestErrorCodesMatchTheDocument(t *testing.T) {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]struct {
						Enum []string `yaml:"enum"`
					} `yaml:"properties"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas["Error"].Properties["error"].Properties["code"].Enum
	if len(documented) == 0 {
		t.Fatal("openapi.yaml: components.schemas.Error.properties.error.properties.code has no enum")
	}
	var declared []string
	for _, c := range wire.ErrorCodes() {
		declared = append(declared, string(c))
		if s := c.Status(); s < 400 || s > 599 {
			t.Errorf("%s answers %d", c, s)
		}
	}
	slices.Sort(declared)
	slices.Sort(documented)
	if !slices.Equal(declared, slices.Compact(slices.Clone(documented))) || len(documented) != len(slices.Compact(slices.Clone(documented))) {
		t.Errorf("declared codes\n%v\nthe document's enum\n%v", declared, documented)
	}
}
