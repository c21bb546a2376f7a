package api

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The published metrics pass two independent checks: client_golang's
// promlint, and Prometheus's own promtool (where installed; .ci/run
// installs it).
func TestMetricsLint(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"l1"}`)
	e.waitState("l1", "started")
	e.do("POST", "/v1/sandboxes/l1/stop", "")
	body := string(e.do("GET", "/metrics", "").body)
	if !strings.Contains(body, "agent_control_plane_sandbox_ready_seconds_bucket") {
		t.Fatalf("the scrape lacks the ready histogram:\n%s", body)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian's prometheus package): the second check did not run")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
