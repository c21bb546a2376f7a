package supervisor

import (
	"net"
	"strconv"
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
