package supervisor

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
)

// portFree agrees with the kernel about what a listener could bind.
func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if portFree(port) {
		t.Fatalf("port %d is listened on, yet reported free", port)
	}
	l.Close()
	if !portFree(port) {
		t.Fatalf("port %d was released, yet reported taken", port)
	}
	// A wildcard listener holds the loopback port too.
	w, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("could not listen on :%d again: %v", port, err)
	}
	defer w.Close()
	if portFree(port) {
		t.Fatalf("port %d is held by a wildcard listener, yet reported free", port)
	}
}

func BenchmarkPortFree(b *testing.B) {
	for b.Loop() {
		portFree(21999)
	}
}

// Concurrent leases, each probing outside the lock, never hand one port
// to two holders; ports a foreign process holds are skipped; the range
// runs out with ErrPortsExhausted and nothing held for nobody.
func TestLeaseConcurrent(t *testing.T) {
	p := newPorts(30000, 30063)
	foreign := map[int]bool{30005: true, 30040: true}
	p.probe = func(port int) bool { return !foreign[port] }
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for i := range 62 {
		wg.Go(func() {
			id := "s" + strconv.Itoa(i)
			port, err := p.lease(id)
			if err != nil {
				t.Errorf("%s: %v", id, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := got[port]; dup {
				t.Errorf("port %d leased to %s and %s", port, other, id)
			}
			got[port] = id
		})
	}
	wg.Wait()
	for port := range foreign {
		if _, ok := got[port]; ok {
			t.Errorf("port %d, held by a foreign process, was leased", port)
		}
	}
	if _, err := p.lease("one-too-many"); !errors.Is(err, ErrPortsExhausted) {
		t.Fatalf("lease past the range: %v, want ErrPortsExhausted", err)
	}
	if n := p.inUse(); n != 62 {
		t.Fatalf("%d ports in use, want 62", n)
	}
}
