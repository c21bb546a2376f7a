package isolate

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connPair is both ends of a unix stream socket, as the daemon and an
// init hold them.
func connPair(t *testing.T) (*conn, *conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]*conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "end")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ends[i] = newConn(c.(*net.UnixConn))
	}
	return ends[0], ends[1]
}

// A request's descriptors ride on its line and work on the other side; a
// later line on the same connection carries none and reads as its own.
func TestConnPassesDescriptors(t *testing.T) {
	daemon, init := connPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := daemon.send(request{Op: "exec", Argv: []string{"true"}}, w, w, w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := daemon.send(request{Op: "kill"}); err != nil {
		t.Fatal(err)
	}
	var got request
	files, err := init.recv(&got)
	if err != nil || got.Op != "exec" || len(files) != 3 {
		t.Fatalf("the first line: %+v, %d files, %v", got, len(files), err)
	}
	if _, err := files[1].WriteString("through the passed descriptor"); err != nil {
		t.Fatal(err)
	}
	closeFiles(files)
	buf := make([]byte, 64)
	if n, _ := r.Read(buf); string(buf[:n]) != "through the passed descriptor" {
		t.Fatalf("read %q", buf[:n])
	}
	files, err = init.recv(&got)
	if err != nil || got.Op != "kill" || len(files) != 0 {
		t.Fatalf("the second line: %+v, %d files, %v", got, len(files), err)
	}
}

// A long line with descriptors (an exec with a large environment) arrives
// whole: a stream socket takes it in parts.
func TestConnSendsALongLineWithDescriptors(t *testing.T) {
	daemon, init := connPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	env := []string{"BIG=" + strings.Repeat("x", 2<<20)}
	go func() { _ = daemon.send(request{Op: "exec", Argv: []string{"true"}, Env: env}, r, w, w) }()
	var got request
	files, err := init.recv(&got)
	defer closeFiles(files)
	if err != nil || len(files) != 3 || len(got.Env) != 1 || got.Env[0] != env[0] {
		t.Fatalf("%d files, %d variables, %v", len(files), len(got.Env), err)
	}
}

// A line longer than the bound is refused, not read whole.
func TestConnBoundsALine(t *testing.T) {
	daemon, init := connPair(t)
	go func() { _ = daemon.send(request{Op: "exec", Argv: []string{strings.Repeat("a", maxLine+1)}}) }()
	var got request
	if _, err := init.recv(&got); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a line past the bound: %v", err)
	}
}

// A program is found in the environment's PATH, in its order, as the
// sandbox sees it; a missing one is ErrNotFound.
func TestLookPath(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(a, "tool"), filepath.Join(b, "tool"), filepath.Join(b, "other")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(a, "other"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/h", "PATH=" + a + ":" + b}
	for name, want := range map[string]string{"tool": filepath.Join(a, "tool"), "other": filepath.Join(b, "other"), "/abs/x": "/abs/x"} {
		if got, err := LookPath(name, env); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := LookPath("missing", env); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing program: %v", err)
	}
}

// The default route of a /proc/net/route table, in the kernel's byte
// order; none yet is an error (pasta has not configured the tap).
func TestParseDefaultRoute(t *testing.T) {
	table := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
	r, err := parseDefaultRoute(strings.NewReader(table))
	if err != nil || r.dev != "eth0" || r.via.String() != "192.0.2.1" {
		t.Fatalf("%+v %v, want eth0 via 192.0.2.1", r, err)
	}
	if _, err := parseDefaultRoute(strings.NewReader(strings.SplitAfter(table, "\n")[0] + strings.SplitAfter(table, "\n")[1])); err == nil {
		t.Fatal("a table without a default route has one")
	}
}

// The forward joins connections to the port inside, at most its bound at
// once: one past it is reset, and a place freed is taken again.
func TestForwardBound(t *testing.T) {
	inside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	go func() {
		for {
			c, err := inside.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // an echo that holds the connection
		}
	}()
	outside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	const bound = 16
	go forward(outside, inside.Addr().(*net.TCPAddr).Port, bound)
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err := io.ReadFull(c, b)
		return err
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range bound {
		c, err := net.Dial("tcp", outside.Addr().String())
		if err == nil {
			err = echo(c) // joined: the forward holds a place for it
		}
		if err != nil {
			t.Fatalf("connection %d within the bound: %v", i, err)
		}
		held = append(held, c)
	}
	past, err := net.Dial("tcp", outside.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(past); err == nil {
		t.Fatalf("connection %d past the bound of %d was forwarded", bound+1, bound)
	}
	past.Close()
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", outside.Addr().String())
		if err == nil {
			err = echo(c)
		}
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the freed place is not taken again: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A control directory whose socket's path passes sun_path's 108 bytes (a
// sandbox's long name beneath a deep root) still takes a listener and a
// connection: through /proc/self/fd.
func TestControlSocketPastSunPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 63), ".init")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if n := len(filepath.Join(dir, socketName)); n < 108 {
		t.Fatalf("the path is %d bytes: it must pass 108 for this test", n)
	}
	var ln *net.UnixListener
	if err := withSocket(dir, func(sock string) (err error) {
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := os.Stat(filepath.Join(dir, socketName)); err != nil {
		t.Fatalf("the socket is not in its directory: %v", err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	var got []byte
	if err := withSocket(dir, func(sock string) error {
		c, err := net.Dial("unix", sock)
		if err == nil {
			got, err = io.ReadAll(c)
			c.Close()
		}
		return err
	}); err != nil || string(got) != "x" {
		t.Fatalf("dial: %q %v", got, err)
	}
}
