package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// ephemeralOverlap counts the ports of a range the kernel may hand to an
// outgoing connection: inside its ephemeral range, less the reserved.
func TestEphemeralOverlap(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rng := write("range", "32768\t60999\n")
	none := filepath.Join(dir, "absent")
	for _, c := range []struct {
		lo, hi   int
		reserved string
		want     int
	}{
		{4100, 4999, none, 0},
		{32000, 32767, none, 0},
		{32000, 32768, none, 1},
		{45000, 45999, none, 1000},
		{60000, 61999, none, 1000},
		{45000, 45999, write("all", "45000-45999\n"), 0},
		{45000, 45999, write("some", "8080,45000-45099,45500\n"), 899},
		{45000, 45999, write("empty", "\n"), 1000},
	} {
		n, eph, err := ephemeralOverlap(c.lo, c.hi, rng, c.reserved)
		if err != nil || n != c.want || eph != "32768-60999" {
			t.Errorf("%d-%d (reserved %s): %d, %q, %v; want %d", c.lo, c.hi, filepath.Base(c.reserved), n, eph, err, c.want)
		}
	}
	if _, _, err := ephemeralOverlap(1, 2, write("bad", "32768\n"), none); err == nil {
		t.Error("a range file with one number read without an error")
	}
	if _, _, err := ephemeralOverlap(1, 2, none, none); err == nil {
		t.Error("a missing range file read without an error")
	}
}

// A daemon whose port range the kernel may give outgoing connections
// says so when it starts, naming both ranges.
func TestEphemeralOverlapLogged(t *testing.T) {
	n, eph, err := ephemeralOverlap(1024, 65535, ephemeralRangeFile, ephemeralReservedFile)
	if err != nil || n == 0 {
		t.Skipf("this machine's ephemeral range cannot be read or is all reserved: %d %v", n, err)
	}
	lo, _ := strconv.Atoi(strings.Split(eph, "-")[0])
	var logBuf syncBuffer
	newHarness(t, func(o *Options) {
		o.PortLo, o.PortHi = lo, lo+99
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	})
	if got := logBuf.String(); !strings.Contains(got, "overlaps the ports the kernel gives outgoing connections") || !strings.Contains(got, "ephemeral="+eph) {
		t.Fatalf("no warning for ports %d-%d inside %s; the log:\n%s", lo, lo+99, eph, got)
	}
}

// A sandbox started again gets its old port back while it is free, and
// another when a listener has taken it meanwhile.
func TestStartAgainKeepsItsPort(t *testing.T) {
	h := realHarness(t, nil)
	sb := h.create("p1", nil, nil)
	h.waitState("p1", Started)
	for round := range 2 {
		if _, err := h.sup.Stop(t.Context(), "p1", false); err != nil {
			t.Fatal(err)
		}
		var squatter net.Listener
		if round == 1 { // someone else listens on it now
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", sb.Port))
			if err != nil {
				t.Fatal(err)
			}
			squatter = l
		}
		again, err := h.sup.Start(t.Context(), "p1")
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 && again.Port != sb.Port {
			t.Fatalf("started again on %d, was %d (free)", again.Port, sb.Port)
		}
		if round == 1 && again.Port == sb.Port {
			t.Fatalf("started again on %d, which another listener holds", again.Port)
		}
		h.waitState("p1", Started)
		if squatter != nil {
			squatter.Close()
		}
	}
}
