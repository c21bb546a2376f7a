package supervisor

import (
	"sync"
	"testing"
)

// daemon-side fan-out of the event feed.
func BenchmarkPublish100(b *testing.B) {
	h := newHub(1024, 256, 0)
	var got sync.WaitGroup
	for range 100 {
		s, _, _, _ := h.subscribe(nil, nil)
		go func() {
			for range s.C {
				got.Done()
			}
		}()
	}
	ev := Event{Type: EventStarted, Sandbox: Sandbox{ID: "x", Labels: map[string]string{"origin": "cli"}}}
	for b.Loop() {
		got.Add(100)
		h.publish(ev)
		got.Wait()
	}
	if n := h.subscribers(); n != 100 {
		b.Fatalf("%d subscribers left: the benchmark dropped some", n)
	}
	h.closeAll()
}
