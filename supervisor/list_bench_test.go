package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// A runtime whose workloads never exit: enough to measure the registry.
type idleRuntime struct{}
type idleHandle struct{ done chan struct{} }

func (idleRuntime) Start(context.Context, Spec) (Handle, error) {
	return idleHandle{make(chan struct{})}, nil
}
func (idleRuntime) Adopt(context.Context, json.RawMessage) (Handle, error) { return nil, ErrGone }
func (idleRuntime) Sweep(context.Context, []string)                        {}
func (h idleHandle) State() json.RawMessage                                { return json.RawMessage(`{}`) }
func (h idleHandle) Done() <-chan struct{}                                 { return h.done }
func (h idleHandle) ExitReason() string                                    { return "" }
func (h idleHandle) Stop(context.Context, time.Duration) error             { return nil }

// Listing 800 sandboxes: the registry's share of GET /v1/sandboxes (the
// whole request is measured by acp-bench against real children).
func BenchmarkList800(b *testing.B) {
	s, err := New(context.Background(), Options{Root: b.TempDir(), PortLo: 20000, PortHi: 20999,
		Runtimes: map[string]Runtime{"native": idleRuntime{}}, ReadyPath: "/x", StartupTimeout: time.Hour})
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
