package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// The product binary links no test tool: neither the fake runtime nor
// the conformance suite (their symbols would name the packages), and its
// help lists no test command.
func TestProductLinksNoTestTool(t *testing.T) {
	bin := testenv.Binary(t)
	out, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm %s: %v\n%s", bin, err, out)
	}
	if !strings.Contains(string(out), "agent-control-plane/supervisor.(*Supervisor).Create") {
		t.Fatalf("go tool nm lists no symbol of the supervisor: is %s the product?", bin)
	}
	for _, pkg := range []string{"supervisor/runtime/fake.", "supervisor/runtime/runtimetest.", "tests/testenv."} {
		if strings.Contains(string(out), "agent-control-plane/"+pkg) {
			t.Errorf("the product binary links %s", strings.TrimSuffix(pkg, "."))
		}
	}
	help, _ := exec.Command(bin, "help").CombinedOutput()
	if strings.Contains(string(help), "stub-exec") {
		t.Errorf("help lists the test tool:\n%s", help)
	}
}
