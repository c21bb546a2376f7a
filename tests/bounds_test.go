package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// 100 request bodies that never arrive are cut after the body deadline,
// while /v1/info and create keep working.
func TestStalledBodiesCut(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_BODY_TIMEOUT_MS=1000")
	var conns []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\":", d.Addr, d.Token)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if _, err := d.Info(); err != nil {
		t.Fatalf("info while bodies stall: %v", err)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"while-stalled"}`); code != 201 {
		t.Fatalf("create while bodies stall: %d %s", code, b)
	}
	// Every stalled connection is closed by the daemon (after an error
	// answer, if any), well after the deadline but long before the
	// connection would time out otherwise.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("stalled connection %d was not closed by the daemon: %v", i, err)
		}
	}
	waitState(t, d, "while-stalled", "started")
}

// Past max_connections, new connections wait in the backlog and cost the
// daemon no file descriptor; once the idle ones go, requests are served.
func TestConnectionCap(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_MAX_CONNECTIONS=32")
	pid := d.Cmd.Process.Pid
	base := fdCount(pid)
	var conns []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// base holds the keep-alive connection of the startup probe: 31 more
	// make the cap.
	testenv.Eventually(t, "the daemon to accept up to its cap", func() bool { return fdCount(pid) >= base+31 })
	if n := fdCount(pid); n > base+32+4 {
		t.Fatalf("the daemon holds %d descriptors with 300 connections open and a cap of 32 (base %d)", n, base)
	}
	for _, c := range conns {
		c.Close()
	}
	if _, err := d.Info(); err != nil {
		t.Fatalf("info after the idle connections closed: %v", err)
	}
	testenv.Eventually(t, "descriptors back to their level", func() bool { return fdCount(pid) <= base+4 })
}
