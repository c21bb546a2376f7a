package api

import (
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// One event encoded as every stream shares it (encodedEvents).
func BenchmarkFormatEvent(b *testing.B) {
	ev := supervisor.Event{Seq: 12, Type: supervisor.EventStarted, Sandbox: supervisor.Sandbox{ID: "scale123", Labels: map[string]string{"origin": "cli"}}}
	b.ReportAllocs()
	for b.Loop() {
		formatEvent(ev)
	}
}
