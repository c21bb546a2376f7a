package tests

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// notifySocket is a unixgram socket the test owns, standing in for
// systemd's NOTIFY_SOCKET.
type notifySocket struct {
	path string
	conn *net.UnixConn
	msgs chan string
}

func newNotifySocket(t *testing.T) *notifySocket {
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, conn: conn, msgs: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return n
}

// next returns the next message that contains want.
func (n *notifySocket) next(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-n.msgs:
			if strings.Contains(m, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("no notification with %q", want)
		}
	}
}

// sd_notify on a real socket: READY=1 only once rehydration is done and the
// API answers, with a STATUS summary; watchdog pings at half the interval;
// STOPPING=1 on SIGTERM.
func TestNotify(t *testing.T) {
	d := startDaemon(t)
	for _, id := range []string{"n1", "n2"} {
		call(t, d, "POST", "/v1/sandboxes", `{"name":"`+id+`"}`)
		waitState(t, d, id, "started")
	}
	call(t, d, "POST", "/v1/sandboxes/n2/stop", "")
	d.Kill()

	ns := newNotifySocket(t)
	d.Env = append(d.Env, "NOTIFY_SOCKET="+ns.path, "WATCHDOG_USEC=400000")
	d.Start()
	ready := ns.next(t, "READY=1")
	// At READY the API answers and the children are re-adopted.
	if info := get(t, d, "n1"); info.State != "started" {
		t.Fatalf("at READY n1 is %s", info.State)
	}
	if !strings.Contains(ready, "STATUS=2 sandboxes, 1 started") {
		t.Fatalf("READY message %q", ready)
	}
	// Pings at about half of the 400 ms interval: ten of them within
	// ten intervals, and on average well inside one interval.
	start := time.Now()
	for range 10 {
		ns.next(t, "WATCHDOG=1")
	}
	if mean := time.Since(start) / 10; mean > 400*time.Millisecond || mean < 100*time.Millisecond {
		t.Fatalf("watchdog pings every %v on average; want about 200 ms", mean)
	}
	d.Signal(syscall.SIGTERM)
	ns.next(t, "STOPPING=1")
	if code, ok := d.Wait(60 * time.Second); !ok || code != 0 {
		t.Fatalf("exit %d %v", code, ok)
	}
}

// activated starts serve with ln passed as fd 3 (LISTEN_FDS=1, LISTEN_PID
// set by the shell that execs the daemon, as systemd would) and stderr on
// a file named as the journal's stream.
func activated(t *testing.T, d *testenv.Daemon, ln *os.File, logPath string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	var st syscall.Stat_t
	syscall.Fstat(int(logf.Fd()), &st)
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve --root "$1"`, testenv.Binary(t), d.Root)
	cmd.Env = append(append(os.Environ(), d.Env...), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	cmd.ExtraFiles = []*os.File{ln}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// With socket activation the listening socket outlives the daemon: across
// a restart, clients wait in the backlog and never see a refused
// connection. Logs to the journal carry no timestamp of their own.
func TestSocketActivationRestart(t *testing.T) {
	lo, hi := portBlock.Next()
	tcp, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo))
	if err != nil {
		t.Skipf("port %d is taken: %v", lo, err)
	}
	ln, _ := tcp.(*net.TCPListener).File()
	tcp.Close() // the duplicate in ln keeps the socket open
	defer ln.Close()
	d := &testenv.Daemon{Root: t.TempDir(), Addr: fmt.Sprintf("127.0.0.1:%d", lo), URL: fmt.Sprintf("http://127.0.0.1:%d", lo), Token: testenv.NewToken(), State: t.TempDir()}
	d.Env = []string{"AGENT_CONTROL_PLANE_TOKEN=" + d.Token, "XDG_STATE_HOME=" + d.State,
		fmt.Sprintf("AGENT_CONTROL_PLANE_PORT_RANGE=%d-%d", lo+1, hi), "AGENT_CONTROL_PLANE_LISTEN=127.0.0.1:1"}
	t.Cleanup(func() { testenv.KillSandboxes(d.Root) })
	logPath := filepath.Join(t.TempDir(), "journal.log")
	first := activated(t, d, ln, logPath)
	testenv.Eventually(t, "the first daemon answers", func() bool { _, err := d.Info(); return err == nil })
	call(t, d, "POST", "/v1/sandboxes", `{"name":"across"}`)
	waitState(t, d, "across", "started")

	// Clients keep calling, each on a new connection, through the restart.
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := &http.Client{Timeout: 60 * time.Second, Transport: testenv.AuthTransport{Token: d.Token, Base: &http.Transport{DisableKeepAlives: true}}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.Get(d.URL + "/v1/sandboxes/across")
				calls.Add(1)
				if err != nil || res.StatusCode != 200 {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err, res))
				}
				if res != nil {
					res.Body.Close()
				}
			}
		})
	}
	testenv.Eventually(t, "calls before the restart", func() bool { return calls.Load() > 20 })
	first.Process.Signal(syscall.SIGTERM)
	first.Wait()
	before := calls.Load()
	activated(t, d, ln, logPath)
	testenv.Eventually(t, "calls after the restart", func() bool { return calls.Load() > before+20 })
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed across the restart; first: %v", n, calls.Load(), firstErr.Load())
	}
	if info := get(t, d, "across"); info.State != "started" {
		t.Fatalf("sandbox after the restart: %s", info.State)
	}
	log, _ := os.ReadFile(logPath)
	if !strings.Contains(string(log), "agent-control-plane serving") || strings.HasPrefix(string(log), "time=") || strings.Contains(string(log), "\ntime=") {
		t.Fatalf("journal log lines should carry no timestamp:\n%s", log)
	}
}
