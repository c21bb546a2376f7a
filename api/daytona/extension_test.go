package daytona

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// The auto-archive interval is read from this face's extension, or, for
// a sandbox recorded before extensions, from the record's fields the core
// kept; this face's own value wins.
func TestAutoArchiveKept(t *testing.T) {
	for _, c := range []struct {
		name string
		ext  supervisor.Extensions
		want time.Duration
	}{
		{"none", nil, 0},
		{"this face's", supervisor.Extensions{extensionKey: extension{AutoArchiveMs: 120000}.raw()}, 2 * time.Minute},
		{"an old record's", supervisor.Extensions{supervisor.RecordExtension: json.RawMessage(`{"autoArchiveIntervalMs":60000,"other":1}`)}, time.Minute},
		{"both", supervisor.Extensions{extensionKey: extension{AutoArchiveMs: 180000}.raw(), supervisor.RecordExtension: json.RawMessage(`{"autoArchiveIntervalMs":60000}`)}, 3 * time.Minute},
		{"not this face's shape", supervisor.Extensions{extensionKey: json.RawMessage(`[1]`)}, 0},
	} {
		if got := extensionOf(supervisor.Sandbox{Extensions: c.ext}).autoArchive(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
