package supervisor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
)

// Listing 800 sandboxes: the registry's share of a list request (the
// whole request is measured by acp-bench against real children).
func BenchmarkList800(b *testing.B) {
	m := fake.NewMachine()
	defer m.Shutdown()
	s, err := New(context.Background(), Options{Root: b.TempDir(), PortLo: 20000, PortHi: 20999,
		Runtimes: registry(&fake.Runtime{M: m}), ReadyPath: "/x", StartupTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	for i := range 800 {
		if _, err := s.Create(context.Background(), CreateRequest{Name: fmt.Sprintf("s%03d", i), Labels: map[string]string{"origin": "cli", "team": "a"}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		s.List(nil)
	}
}
