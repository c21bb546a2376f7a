package supervisor

import (
	"go/build"
	"strings"
	"testing"
)

// The supervisor drives workloads only through the runtime contract: it
// imports neither proc nor any runtime implementation (those are wired in
// by the daemon).
func TestImportsOnlyTheContract(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasSuffix(imp, "/proc") || strings.Contains(imp, "/supervisor/runtime/") {
			t.Errorf("supervisor imports %s", imp)
		}
	}
}
