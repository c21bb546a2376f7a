package api

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// The README lists every route and every metric the daemon serves.
func TestREADMEDocumentsRoutesAndMetrics(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, rt := range routes {
		if !strings.Contains(readme, "`"+rt.method+" "+rt.path) {
			t.Errorf("README.md does not list %s %s", rt.method, rt.path)
		}
	}
	names := metricNames(t)
	for name := range names {
		if !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README.md does not list the metric %s", name)
		}
	}
}

// metricNames lists every metric the daemon exposes.
func metricNames(t *testing.T) map[string]bool {
	e := newEnv(t, nil)
	e.do("GET", "/v1/info", "") // so the HTTP metrics have a sample
	families, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Counters and histograms with no sample yet are not gathered;
	// describe them instead.
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	descs := make(chan *prometheus.Desc, 64)
	newCollector(e.sup).Describe(descs)
	close(descs)
	for d := range descs {
		s := d.String()
		i := strings.Index(s, `fqName: "`) + len(`fqName: "`)
		names[s[i:i+strings.IndexByte(s[i:], '"')]] = true
	}
	return names
}

// The alert rules in contrib/ parse and name only metrics that exist.
func TestContribRulesNameRealMetrics(t *testing.T) {
	names := metricNames(t)
	b, err := os.ReadFile("../contrib/agent-control-plane.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil || len(rules.Groups) == 0 {
		t.Fatalf("rules: %v", err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range regexp.MustCompile(`agent_control_plane_[a-z_]+`).FindAllString(r.Expr, -1) {
				n++
				if !names[m] {
					t.Errorf("rule %s names %s, which the daemon does not expose", r.Alert, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no metric named in the rules")
	}
	for _, f := range []string{"../contrib/prometheus.yml", "../contrib/process-compose.yaml"} {
		b, _ := os.ReadFile(f)
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil || len(v) == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
