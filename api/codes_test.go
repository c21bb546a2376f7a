package api

import (
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

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

// The document's pattern for the logs' since parameter accepts what the
// daemon parses and refuses what it refuses.
func TestSincePatternMatchesTheParser(t *testing.T) {
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]struct {
			Get struct {
				Parameters []struct {
					Name   string `yaml:"name"`
					Schema struct {
						Pattern string `yaml:"pattern"`
					} `yaml:"schema"`
				} `yaml:"parameters"`
			} `yaml:"get"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var pattern string
	for _, p := range doc.Paths["/v1/sandboxes/{id}/entrypoint-logs"].Get.Parameters {
		if p.Name == "since" {
			pattern = p.Schema.Pattern
		}
	}
	if pattern == "" {
		t.Fatal("openapi.yaml: entrypoint-logs has no since parameter with a pattern")
	}
	re := regexp.MustCompile(pattern)
	now := time.Now()
	for _, s := range []string{"90s", "10m", "1h30m", "1.5h", "0", "250ms", "+5m", "2026-12-01T15:04:05Z", "2026-12-01T15:04:05.123+01:00", "2026-12-01T15:04:05", "2026-12-01",
		"yesterday", "-5m", "", "10", "1d", "2026-12-01 15:04:05", "2026-12-01T15:04", "5m ago"} {
		_, perr := wire.ParseSince(s, now)
		if re.MatchString(s) != (perr == nil) {
			t.Errorf("since %q: the document's pattern matches it: %v; the daemon parses it: %v (%v)", s, re.MatchString(s), perr == nil, perr)
		}
	}
}
