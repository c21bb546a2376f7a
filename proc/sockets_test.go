package proc

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// A socket listening on a port is found for the process that holds it
// and for no other; the kernel's answer and /proc's tables agree.
func TestListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	for _, c := range []struct {
		pids []int
		want bool
	}{
		{[]int{os.Getpid()}, true},
		{[]int{other.Process.Pid}, false},
		{[]int{other.Process.Pid, os.Getpid()}, true},
		{nil, false},
	} {
		if got, err := Listening(port, c.pids); err != nil || got != c.want {
			t.Errorf("Listening(%d, %v) = %v, %v; want %v", port, c.pids, got, err, c.want)
		}
	}
	diag, table := map[string]bool{}, map[string]bool{}
	if err := diagListeners(port, diag); err != nil {
		t.Fatalf("sock_diag: %v", err)
	}
	if err := listeners("/proc/self/net/tcp", port, table); err != nil {
		t.Fatal(err)
	}
	if len(diag) != 1 || len(table) != 1 {
		t.Fatalf("sock_diag %v, /proc %v", diag, table)
	}
	for ino := range diag {
		if !table[ino] {
			t.Fatalf("sock_diag %v, /proc %v", diag, table)
		}
	}
	// A connected socket on the port is not a listener.
	c, _ := net.Dial("tcp", l.Addr().String())
	defer c.Close()
	if got, _ := Listening(c.LocalAddr().(*net.TCPAddr).Port, []int{os.Getpid()}); got {
		t.Fatal("a connected socket counted as a listener")
	}
}
