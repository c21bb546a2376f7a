package api

import (
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	for name := range names {
		if !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README.md does not list the metric %s", name)
		}
	}
}
