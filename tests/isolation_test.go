package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// isolatedDaemon is a daemon whose native sandboxes are isolated, or a
// skip saying why this machine cannot isolate them.
func isolatedDaemon(t *testing.T, env ...string) *testenv.Daemon {
	t.Helper()
	if err := native.Probe(); err != nil {
		t.Skipf("isolation needs unprivileged namespaces, which this machine refuses: %v", err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the isolation tests serve and dial from inside with python3, which is not installed")
	}
	return startDaemon(t, append([]string{"AGENT_CONTROL_PLANE_ISOLATION=namespaces"}, env...)...)
}

// daemonIsolates reports whether d's native sandboxes are isolated.
func daemonIsolates(t *testing.T, d *testenv.Daemon) bool {
	t.Helper()
	code, b := call(t, d, "GET", "/v1/info", "")
	return code == 200 && strings.Contains(string(b), `"isolation":"namespaces"`)
}

// execIn runs script with sh in sandbox id through /v1 exec.
func execIn(t *testing.T, d *testenv.Daemon, id, script string) (code int, stdout, stderr string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"argv": []string{"sh", "-c", script}, "timeoutMs": 60000})
	status, b := call(t, d, "POST", "/v1/sandboxes/"+id+"/exec", string(body))
	var r struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if status != 200 || json.Unmarshal(b, &r) != nil {
		t.Fatalf("exec in %s: %d %s", id, status, b)
	}
	return r.ExitCode, r.Stdout, r.Stderr
}

func createStarted(t *testing.T, d *testenv.Daemon, id, extra string) sandboxInfo {
	t.Helper()
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"`+id+`"`+extra+`}`); code != 201 {
		t.Fatalf("create %s: %d %s", id, code, b)
	}
	return waitState(t, d, id, "started")
}

// An isolated sandbox sees its workspace and the host's system
// directories, and nothing else of the host: not the daemon's state (its
// token and address), not the root's records, not another sandbox's
// files, not the user's home; its /proc holds its own processes; its
// files are the daemon user's on the host.
func TestIsolatedSandboxSeesOnlyItself(t *testing.T) {
	home := t.TempDir()
	planted := filepath.Join(home, "secret.txt")
	if err := os.WriteFile(planted, []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testenv.NewToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	d := isolatedDaemon(t, "HOME="+home, "AGENT_CONTROL_PLANE_TOKEN_FILE="+tokenFile)
	a := createStarted(t, d, "iso-a", "")
	createStarted(t, d, "iso-b", "")
	if code, b := call(t, d, "GET", "/v1/info", ""); code != 200 || !strings.Contains(string(b), `"isolation":"namespaces"`) {
		t.Fatalf("/v1/info: %d %s", code, b)
	}
	if code, b := call(t, d, "GET", "/v1/sandboxes/iso-a", ""); code != 200 || !strings.Contains(string(b), `"isolation":"namespaces"`) {
		t.Fatalf("get: %d %s", code, b)
	}
	for _, path := range []string{
		tokenFile, planted,
		filepath.Join(d.Root, "iso-b", "workspace"), filepath.Join(d.Root, "iso-a", "sandbox.json"),
		filepath.Join(d.Root, "iso-b", "sandbox.json"), d.State,
	} {
		if code, out, _ := execIn(t, d, "iso-a", "cat "+path+" || ls "+path); code == 0 {
			t.Errorf("from inside, %s is readable: %q", path, out)
		}
	}
	if _, out, _ := execIn(t, d, "iso-a", "ls "+d.Root); strings.TrimSpace(out) != "iso-a" {
		t.Errorf("from inside, the root shows %q, want only the way to its own workspace", out)
	}
	// Its own workspace, read-write, at the path it is told.
	code, out, errOut := execIn(t, d, "iso-a", `echo made > "$AGENT_WORKSPACE_DIR/made.txt" && pwd`)
	if code != 0 || strings.TrimSpace(out) != a.Workspace {
		t.Fatalf("write in the workspace: %d %q %q (workspace %s)", code, out, errOut, a.Workspace)
	}
	fi, err := os.Stat(filepath.Join(a.Workspace, "made.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if ownerOf(fi) != os.Geteuid() {
		t.Errorf("a file the workload made belongs to uid %d, want the daemon's %d", ownerOf(fi), os.Geteuid())
	}
	// PID 1 is the sandbox's init; only the sandbox's processes are there.
	_, cmdline, _ := execIn(t, d, "iso-a", `tr '\0' ' ' < /proc/1/cmdline; echo; ls -d /proc/[0-9]* | wc -l`)
	lines := strings.Split(strings.TrimSpace(cmdline), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "agent-control-plane-init") {
		t.Fatalf("/proc/1 inside: %q", cmdline)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(lines[1])); n < 3 || n > 8 {
		t.Errorf("/proc inside lists %d processes, want the sandbox's few (init, agent, this shell, ls)", n)
	}
	// No capability inside: the routes, the mounts stay as they are.
	if _, status, _ := execIn(t, d, "iso-a", "grep Cap /proc/self/status"); !strings.Contains(status, "0000000000000000") {
		t.Errorf("a command inside has capabilities: %q", status)
	}
}

// Every isolated sandbox's agent listens on port 4000 of its own
// loopback; each is reached at its leased port, and a Daytona preview of
// 4000 or of another port it listens on reaches that sandbox and no
// other. The host's loopback is not reachable from inside.
func TestIsolatedSandboxesShareNoPorts(t *testing.T) {
	d := isolatedDaemon(t)
	hc := d.HTTP(30 * time.Second)
	for _, id := range []string{"port-a", "port-b"} {
		sb := createStarted(t, d, id, "")
		var info struct {
			SandboxID string `json:"sandboxId"`
		}
		res, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/api/info", sb.Port))
		if err == nil {
			err = json.NewDecoder(res.Body).Decode(&info)
			res.Body.Close()
		}
		if err != nil || info.SandboxID != id {
			t.Fatalf("%s's agent at its leased port %d: %+v %v", id, sb.Port, info, err)
		}
		if _, port, _ := execIn(t, d, id, `echo $PORT`); strings.TrimSpace(port) != "4000" {
			t.Fatalf("%s's agent is told PORT=%q, want 4000", id, port)
		}
		// A second server inside, on the same port in both.
		if code, _, e := execIn(t, d, id, `mkdir -p /tmp/www && echo `+id+` > /tmp/www/who && cd /tmp/www && nohup python3 -m http.server 3000 >/dev/null 2>&1 &`); code != 0 {
			t.Fatalf("serve inside %s: %s", id, e)
		}
	}
	for _, id := range []string{"port-a", "port-b"} {
		for _, c := range []struct {
			port int
			path string
			want string
		}{{4000, "/api/info", `"sandboxId":"` + id + `"`}, {3000, "/who", id}} {
			code, b := call(t, d, "GET", fmt.Sprintf("/api/sandbox/%s/ports/%d/preview-url", id, c.port), "")
			var p struct{ URL, Token string }
			if code != 200 || json.Unmarshal(b, &p) != nil {
				t.Fatalf("preview-url %s %d: %d %s", id, c.port, code, b)
			}
			url, token := p.URL, p.Token
			testenv.Eventually(t, fmt.Sprintf("%s's port %d through its preview", id, c.port), func() bool {
				req, _ := http.NewRequest("GET", url+c.path, nil)
				req.Header.Set("X-Daytona-Preview-Token", token)
				res, err := hc.Do(req)
				if err != nil {
					return false
				}
				defer res.Body.Close()
				return res.StatusCode == 200 && strings.Contains(readAll(res), c.want)
			})
		}
	}
	hostLoopbackUnreachable(t, d, "port-a")
	// The forward is the sandbox's: it answers while the daemon is down,
	// and the sandbox is re-adopted with it.
	a := get(t, d, "port-a")
	d.Kill()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/api/info", a.Port))
	if err != nil || res.StatusCode != 200 || !strings.Contains(readAll(res), `"sandboxId":"port-a"`) {
		t.Fatalf("the agent at its leased port while the daemon is down: %v", err)
	}
	d.Start()
	if again := get(t, d, "port-a"); again.State != "started" || again.Port != a.Port {
		t.Fatalf("after the restart: %+v", again)
	}
	if code, out, _ := execIn(t, d, "port-a", "cat /tmp/www/who"); code != 0 || out != "port-a\n" {
		t.Errorf("an exec in the re-adopted sandbox sees its /tmp: %d %q", code, out)
	}
}

// closingListener listens on addr until the test ends, closing each
// connection it accepts: a host service a sandbox should, or should not,
// reach.
func closingListener(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

func ownerOf(fi os.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }

// hostLoopbackUnreachable: from inside sandbox id, neither a listener
// of the host's loopback nor the daemon's own port answers.
func hostLoopbackUnreachable(t *testing.T, d *testenv.Daemon, id string) {
	t.Helper()
	// A listener of the host's loopback, and the daemon's own port.
	ln := closingListener(t, "127.0.0.1:0")
	_, daemonPort, _ := net.SplitHostPort(strings.TrimPrefix(d.URL, "http://"))
	for _, port := range []string{strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), daemonPort} {
		code, out, _ := execIn(t, d, id, dialScript("127.0.0.1", port))
		if code == 0 || strings.Contains(out, "connected") {
			t.Errorf("the host's loopback port %s is reachable from inside: %q", port, out)
		}
	}
}

// dialScript connects to host:port with python3 and says "connected".
func dialScript(host, port string) string {
	return `python3 -c 'import socket,sys; s=socket.create_connection(("` + host + `",` + port + `),3); print("connected")'`
}

func readAll(res *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// testHost is a host the test makes: its own network namespace, joined
// to this one by a veth pair, at a 10.x address the test assigns,
// serving HTTP on port 8080. Removed at the end.
func testHost(t *testing.T) (addr, subnet string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a test host in its own network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("a test host needs iproute2's ip, which is not installed")
	}
	n := rand.IntN(200) + 20
	ns, host, peer := fmt.Sprintf("acpt%d", n), fmt.Sprintf("acph%d", n), fmt.Sprintf("acpp%d", n)
	subnet = fmt.Sprintf("10.213.%d.0/24", n)
	addr = fmt.Sprintf("10.213.%d.2", n)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", ns)
	run("addr", "add", fmt.Sprintf("10.213.%d.1/24", n), "dev", host)
	run("link", "set", host, "up")
	run("-n", ns, "addr", "add", addr+"/24", "dev", peer)
	run("-n", ns, "link", "set", peer, "up")
	run("-n", ns, "link", "set", "lo", "up")
	srv := exec.Command("ip", "netns", "exec", ns, "python3", "-m", "http.server", "8080", "--bind", addr)
	srv.Dir = t.TempDir()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	testenv.Eventually(t, "the test host serves", func() bool {
		c, err := net.DialTimeout("tcp", addr+":8080", time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, subnet
}

// The network policy of isolated sandboxes, against a test host of the
// test's own: reachable by default, not with networkBlockAll, reachable
// with an allow list that names it and not with one that does not.
func TestIsolatedNetworkPolicy(t *testing.T) {
	if _, err := exec.LookPath("pasta"); err != nil {
		t.Skip("isolated sandboxes reach the outside through pasta (Debian's passt), which is not installed")
	}
	addr, subnet := testHost(t)
	d := isolatedDaemon(t)
	for _, c := range []struct {
		id, body string
		reach    bool
	}{
		{"net-default", "", true},
		{"net-blocked", `,"networkBlockAll":true`, false},
		{"net-allowed", `,"networkAllowList":"192.0.2.0/24,` + subnet + `"`, true},
		{"net-other", `,"networkAllowList":"10.250.0.0/16"`, false},
	} {
		createStarted(t, d, c.id, c.body)
		reach := func() bool {
			code, out, _ := execIn(t, d, c.id, dialScript(addr, "8080"))
			return code == 0 && strings.Contains(out, "connected")
		}
		if c.reach {
			// The outside network comes up beside the agent's start.
			testenv.Eventually(t, c.id+" reaches the test host", reach)
		} else if reach() {
			t.Errorf("%s reached the test host", c.id)
		}
	}
	// Daytona's answer carries the policy it was given.
	if code, b := call(t, d, "GET", "/api/sandbox/net-blocked", ""); code != 200 || !strings.Contains(string(b), `"networkBlockAll":true`) {
		t.Errorf("Daytona's sandbox: %d %s", code, b)
	}
	if code, b := call(t, d, "GET", "/v1/sandboxes/net-allowed", ""); code != 200 || !strings.Contains(string(b), `"networkAllowList":"192.0.2.0/24,`+subnet+`"`) {
		t.Errorf("/v1's sandbox: %d %s", code, b)
	}
	// Bad lists are refused at the boundary, naming the field.
	for _, bad := range []string{`"networkAllowList":"example.com"`, `"networkAllowList":"` + strings.Repeat("10.0.0.0/8,", 11) + `"`} {
		code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"net-bad",`+bad+`}`)
		if code != 400 || !strings.Contains(string(b), "networkAllowList") {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
}

// Without isolation the network fields are refused with a 400 that says
// why, and nothing is made; port 4000 of a Daytona preview is the
// agent's leased port.
func TestNetworkPolicyNeedsIsolation(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_ISOLATION=off")
	for _, body := range []string{`"networkBlockAll":true`, `"networkAllowList":"10.0.0.0/8"`} {
		code, b := call(t, d, "POST", "/api/sandbox", `{"name":"plain-net",`+body+`}`)
		if code != 400 || !strings.Contains(string(b), "isolat") {
			t.Errorf("%s without isolation: %d %s", body, code, b)
		}
		if code, _ := call(t, d, "GET", "/v1/sandboxes/plain-net", ""); code != 404 {
			t.Errorf("a refused create left a sandbox: %d", code)
		}
	}
	createStarted(t, d, "plain", "")
	if code, b := call(t, d, "GET", "/v1/sandboxes/plain", ""); code != 200 || !strings.Contains(string(b), `"isolation":"off"`) {
		t.Fatalf("get: %d %s", code, b)
	}
	code, b := call(t, d, "GET", "/api/sandbox/plain/ports/4000/preview-url", "")
	var p struct{ URL, Token string }
	if code != 200 || json.Unmarshal(b, &p) != nil {
		t.Fatalf("preview-url: %d %s", code, b)
	}
	req, _ := http.NewRequest("GET", p.URL+"/api/info", nil)
	req.Header.Set("X-Daytona-Preview-Token", p.Token)
	res, err := d.HTTP(30 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(res); res.StatusCode != 200 || !strings.Contains(body, `"sandboxId":"plain"`) {
		t.Errorf("a preview of port 4000 of a sandbox without isolation: %d %s", res.StatusCode, body)
	}
}

// A snapshot says its own isolation whatever the daemon's mode, and
// names more of the host for its sandboxes to see, read-only unless it
// says otherwise.
func TestSnapshotIsolationAndMounts(t *testing.T) {
	if err := native.Probe(); err != nil {
		t.Skipf("isolation needs unprivileged namespaces, which this machine refuses: %v", err)
	}
	shared, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "hello.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := strconv.Quote(testenv.Binary(t))
	d := configDaemon(t, fmt.Sprintf(`
isolation = "off"
[snapshots.fenced]
command = [%s, "stub-agent"]
isolation = "namespaces"
mounts = [{ source = %q, target = "/data" }, { source = %q, read_write = true }]
[snapshots.plain]
command = [%s, "stub-agent"]
`, bin, shared, rw, bin))
	createStarted(t, d, "fenced", `,"snapshot":"fenced"`)
	createStarted(t, d, "plain", `,"snapshot":"plain"`)
	for id, want := range map[string]string{"fenced": "namespaces", "plain": "off"} {
		if code, b := call(t, d, "GET", "/v1/sandboxes/"+id, ""); code != 200 || !strings.Contains(string(b), `"isolation":"`+want+`"`) {
			t.Errorf("%s: %d %s, want isolation %s", id, code, b, want)
		}
		if _, out, _ := cli(t, d, "get", id); !regexp.MustCompile(`Isolation:\s+` + want + `\n`).MatchString(out) {
			t.Errorf("get %s shows no isolation %s:\n%s", id, want, out)
		}
	}
	if _, out, _ := cli(t, d, "info"); !regexp.MustCompile(`Isolation:\s+off\n`).MatchString(out) {
		t.Errorf("info shows not the daemon's mode:\n%s", out)
	}
	if code, out, e := execIn(t, d, "fenced", "cat /data/hello.txt"); code != 0 || out != "from the host" {
		t.Errorf("a mount read inside: %d %q %q", code, out, e)
	}
	if code, _, _ := execIn(t, d, "fenced", "touch /data/new"); code == 0 {
		t.Error("a read-only mount was written")
	}
	if code, _, e := execIn(t, d, "fenced", "echo w > "+filepath.Join(rw, "w.txt")); code != 0 {
		t.Errorf("a read-write mount at its own path: %d %q", code, e)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "w.txt")); err != nil || string(b) != "w\n" {
		t.Errorf("what the sandbox wrote in its read-write mount: %q %v", b, err)
	}
	// A mount whose source is not a clean absolute path stops the load.
	path := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(path, []byte("[snapshots.bad]\ncommand = [\"x\"]\nmounts = [{ source = \"relative/dir\" }]\n"), 0o600)
	serve := exec.CommandContext(testenv.Context(t), testenv.Binary(t), "serve", "--config", path, "--root", t.TempDir(),
		"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	serve.Env = append(os.Environ(), "AGENT_CONTROL_PLANE_TOKEN="+testenv.NewToken(), "XDG_STATE_HOME="+t.TempDir())
	out, err := serve.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "mount source") {
		t.Errorf("a relative mount: %v %s", err, out)
	}
}
