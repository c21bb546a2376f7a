// Package testenv builds the agent-control-plane binary once per test
// process and starts real daemons for tests: each on its own root, listen
// port and sandbox port range, killed (with its children) when the test
// ends.
//
// This file is long because it is every test's way to a daemon
// (binaries, ports, roots, start, stop, clean-up), used by all packages.
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
)

// A binary the tests run, built once per test process unless make test
// names one it built.
type binary struct {
	once sync.Once
	path string
	err  error
}

var product, tool binary

// Binary returns the path of an agent-control-plane binary: the one named
// by $ACP_TEST_BINARY (make test builds it), or one built now into a
// temporary directory, once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	return product.get(t, "ACP_TEST_BINARY", "agent-control-plane")
}

// ToolArgv is the argv prefix that runs the conformance suite's test
// tool (cmd/stub-exec: fake.Tool as a program) outside the fake runtime:
// $ACP_TEST_TOOL, or one built now. The product binary does not have it.
func ToolArgv(t testing.TB) []string {
	t.Helper()
	return []string{tool.get(t, "ACP_TEST_TOOL", "stub-exec")}
}

// BuildStatic builds ./cmd/NAME without cgo into dir/NAME, for an image
// FROM scratch.
func BuildStatic(dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out, nil
}

func (b *binary) get(t testing.TB, envKey, name string) string {
	t.Helper()
	b.once.Do(func() {
		if p := os.Getenv(envKey); p != "" {
			b.path, b.err = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "acp-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/"+name)
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// StubArgv is the native command that runs the bundled stub agent.
func StubArgv(t testing.TB) []string { return []string{Binary(t), "stub-agent"} }

// PortBlock hands out disjoint port ranges below the kernel's ephemeral
// range, so that tests running at once never lease the same port. Each
// package passes its own base.
type PortBlock struct {
	Base, Size int
	next       atomic.Int64
}

// Next returns the next unused range.
func (b *PortBlock) Next() (lo, hi int) {
	i := int(b.next.Add(1)) - 1
	lo = b.Base + i*b.Size
	return lo, lo + b.Size - 1
}

// FreePort returns a loopback port that was free a moment ago, chosen below
// the kernel's ephemeral range (and above the tests' sandbox port blocks).
//
// Not from the ephemeral range: a client polling a port there while nothing
// listens can be given that very port as its source port and connect to
// itself (a TCP self-connect), and then holds the port that a daemon
// starting a moment later wants to listen on.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := 30000, 32700
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if eph, err := strconv.Atoi(f[0]); err == nil && eph-1 < hi {
				hi = eph - 1
			}
		}
	}
	if hi <= lo {
		t.Fatalf("no port below the ephemeral range is available for tests (range %d-%d)", lo, hi)
	}
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free port found")
	return 0
}

// Daemon is a running agent-control-plane serve process.
type Daemon struct {
	t     testing.TB
	Root  string
	Addr  string // host:port
	URL   string // http://host:port
	Token string // the API's bearer token
	State string // the daemon's $XDG_STATE_HOME
	// ConfigHome is the daemon's $XDG_CONFIG_HOME.
	ConfigHome string
	Env        []string
	Args       []string
	Cmd        *exec.Cmd
	LogPath    string
	exited     chan struct{}
}

// Options for StartDaemon.
type Options struct {
	Root   string // default t.TempDir()
	PortLo int    // sandbox range
	PortHi int
	Env    []string // extra environment, KEY=VALUE
	Args   []string // extra serve flags
	Listen string   // default 127.0.0.1:<free port>
	// State is the daemon's $XDG_STATE_HOME; default t.TempDir().
	State string
	// Config is written to the daemon's default config file
	// ($XDG_CONFIG_HOME/agent-control-plane/config.toml, under a
	// directory of its own); empty: no config file.
	Config string
	// TokenFile: the daemon finds its token as it would by default, in
	// the token file under its own $XDG_STATE_HOME (created on first
	// start), instead of from $AGENT_CONTROL_PLANE_TOKEN.
	TokenFile bool
}

// StartDaemon starts `agent-control-plane serve` and waits until /v1/info
// answers. The daemon and every process under its root carrying a sandbox
// marker are killed when the test ends.
func StartDaemon(t testing.TB, o Options) *Daemon {
	t.Helper()
	if o.Root == "" {
		o.Root = t.TempDir()
	}
	if o.Listen == "" && o.PortLo > 0 {
		// The block's first port for the API, the rest for sandboxes: a
		// block is this test's alone.
		o.Listen = "127.0.0.1:" + strconv.Itoa(o.PortLo)
		o.PortLo++
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:" + strconv.Itoa(FreePort(t))
	}
	if o.State == "" {
		o.State = t.TempDir()
	}
	d := &Daemon{t: t, Root: o.Root, Addr: o.Listen, URL: "http://" + o.Listen, State: o.State,
		Args: o.Args, LogPath: filepath.Join(t.TempDir(), "daemon.log")}
	// Its own state and config directories, so that no test writes a
	// token file into the home of whoever runs the tests, nor reads their
	// config file.
	d.ConfigHome = t.TempDir()
	if o.Config != "" {
		dir := filepath.Join(d.ConfigHome, "agent-control-plane")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(o.Config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.Env = append([]string{"XDG_STATE_HOME=" + d.State, "XDG_CONFIG_HOME=" + d.ConfigHome}, o.Env...)
	if !o.TokenFile {
		d.Token = NewToken()
		d.Env = append(d.Env, "AGENT_CONTROL_PLANE_TOKEN="+d.Token)
	}
	if o.PortLo > 0 {
		d.Env = append(d.Env, fmt.Sprintf("AGENT_CONTROL_PLANE_PORT_RANGE=%d-%d", o.PortLo, o.PortHi))
	}
	d.Start()
	if o.TokenFile {
		b, err := os.ReadFile(filepath.Join(d.State, "agent-control-plane", "token"))
		if err != nil {
			t.Fatalf("the daemon made no token file: %v", err)
		}
		d.Token = strings.TrimSpace(string(b))
	}
	t.Cleanup(func() {
		d.Kill()
		KillSandboxes(d.Root)
	})
	return d
}

// Start (re)starts the daemon process on the same root and address.
func (d *Daemon) Start() {
	d.t.Helper()
	args := append([]string{"serve", "--root", d.Root, "--listen", d.Addr}, d.Args...)
	cmd := exec.Command(Binary(d.t), args...)
	cmd.Env = append(os.Environ(), d.Env...)
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// The daemon dies with the test process, even one killed by a timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	logf.Close()
	d.Cmd = cmd
	d.exited = make(chan struct{})
	go func(c chan struct{}) { cmd.Wait(); close(c) }(d.exited)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errExited := errors.New("exited")
	err = probe.Backoff{Initial: 10 * time.Millisecond}.Until(ctx, func(context.Context) (bool, error) {
		if _, err := d.Info(); err == nil {
			return true, nil
		}
		if isClosed(d.exited) {
			return false, errExited
		}
		return false, nil
	})
	switch {
	case errors.Is(err, errExited):
		d.t.Fatalf("daemon exited during startup:\n%s", d.Log())
	case err != nil:
		d.t.Fatalf("daemon did not answer /v1/info:\n%s", d.Log())
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// NewToken returns a random token for a test daemon.
func NewToken() string { return fmt.Sprintf("test-token-%016x%016x", rand.Uint64(), rand.Uint64()) }

// ClientEnv is the environment a CLI process needs to reach d: its URL and
// its token.
func (d *Daemon) ClientEnv() []string {
	return []string{"AGENT_CONTROL_PLANE_URL=" + d.URL, "AGENT_CONTROL_PLANE_TOKEN=" + d.Token}
}

// HTTP returns an HTTP client that sends d's token with every request that
// carries no Authorization of its own.
func (d *Daemon) HTTP(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: AuthTransport{Token: d.Token}}
}

// AuthTransport adds a bearer token to requests that carry no
// Authorization header.
type AuthTransport struct {
	Token string
	Base  http.RoundTripper // default http.DefaultTransport
}

// RoundTrip implements http.RoundTripper.
func (a AuthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := a.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if r.Header.Get("Authorization") == "" && a.Token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+a.Token)
	}
	return base.RoundTrip(r)
}

// Log returns what the daemon has logged so far.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.LogPath)
	return string(b)
}

// Kill sends SIGKILL to the daemon (not its children) and waits for it.
func (d *Daemon) Kill() {
	if d.Cmd == nil || d.Cmd.Process == nil {
		return
	}
	d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// Signal sends sig to the daemon.
func (d *Daemon) Signal(sig os.Signal) { d.Cmd.Process.Signal(sig) }

// Wait waits for the daemon to exit and returns its exit code.
func (d *Daemon) Wait(timeout time.Duration) (int, bool) {
	select {
	case <-d.exited:
		return d.Cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Info fetches /v1/info.
func (d *Daemon) Info() (map[string]any, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(d.URL + "/v1/info")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// KillSandboxes SIGKILLs every process carrying the marker of a record
// under root, then removes their cgroups (RemoveCgroups): a test's
// cleanup, so children never outlive it. It scans
// /proc itself rather than call proc.KillMarked, because proc's own tests
// import this package (and a cleanup net should not share the code it
// guards against).
func KillSandboxes(root string) {
	eachRecord(root, func(b []byte) {
		var r struct {
			Marker string `json:"marker"`
		}
		if json.Unmarshal(b, &r) == nil && r.Marker != "" {
			killMarked(r.Marker)
		}
	})
	RemoveCgroups(root)
}

// eachRecord calls fn with each sandbox record under root, as read.
func eachRecord(root string, fn func([]byte)) {
	recs, _ := filepath.Glob(filepath.Join(root, "*", "sandbox.json"))
	for _, path := range recs {
		if b, err := os.ReadFile(path); err == nil {
			fn(b)
		}
	}
}

// RemoveCgroups removes the cgroups that the records under root name, and
// every empty group of the daemon subtrees they are in, once their
// processes are gone (KillSandboxes first): a test's cleanup, so that
// killed daemons leave no cgroup behind. Like KillSandboxes it reads the
// files itself, and it removes only empty groups (the kernel refuses the
// others).
func RemoveCgroups(root string) {
	mounts := map[string]string{} // "" for cgroup2, else a v1 controller → mount point
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) < 4:
			case f[2] == "cgroup2":
				mounts[""] = f[1]
			case f[2] == "cgroup":
				for _, o := range strings.Split(f[3], ",") {
					mounts[o] = f[1]
				}
			}
		}
	}
	bases := map[string]bool{}
	eachRecord(root, func(b []byte) {
		var r struct {
			Handle struct {
				Data struct {
					Cgroup *struct {
						Path string            `json:"path"`
						V1   map[string]string `json:"v1"`
					} `json:"cgroup"`
				} `json:"data"`
			} `json:"handle"`
		}
		if json.Unmarshal(b, &r) != nil || r.Handle.Data.Cgroup == nil {
			return
		}
		cg := r.Handle.Data.Cgroup
		paths := map[string]string{"": cg.Path}
		for c, p := range cg.V1 {
			paths[c] = p
		}
		for c, p := range paths {
			if m, ok := mounts[c]; ok && strings.HasPrefix(p, "/") && !strings.Contains(p, "..") {
				bases[filepath.Dir(filepath.Join(m, p))] = true
			}
		}
	})
	// The daemon makes its subtree in every hierarchy, not only in those
	// a record names: the same name under the daemon's own cgroup in each,
	// which is this process's (the test spawned it).
	names := map[string]bool{}
	for base := range bases {
		names[filepath.Base(base)] = true
	}
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			for _, c := range strings.Split(f[1], ",") {
				if m, ok := mounts[c]; ok {
					for name := range names {
						bases[filepath.Join(m, f[2], name)] = true
					}
				}
			}
		}
	}
	for base := range bases {
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if e.IsDir() {
				rmdirWhenEmpty(filepath.Join(base, e.Name()))
			}
		}
		rmdirWhenEmpty(base)
	}
}

// rmdirWhenEmpty removes a cgroup, waiting up to a few seconds for the
// processes just killed in it to go.
func rmdirWhenEmpty(dir string) {
	for range 100 {
		if err := syscall.Rmdir(dir); err != syscall.EBUSY {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killMarked(marker string) {
	for _, pid := range Marked(marker) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// Marked lists the processes that carry a sandbox's marker.
func Marked(marker string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	want := "AGENT_CONTROL_PLANE_MARKER=" + marker
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), want) {
			out = append(out, pid)
		}
	}
	return out
}

// Eventually polls cond until it holds or a generous deadline passes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if (probe.Backoff{Initial: 5 * time.Millisecond}).Until(ctx, func(context.Context) (bool, error) { return cond(), nil }) != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Context returns a context that ends with the test or after a generous
// deadline.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ForeignProcess starts `sleep` in its own session, carrying no sandbox
// marker, the way any other program on the machine would run, and returns
// its PID. It is killed and reaped when the test ends.
func ForeignProcess(t testing.TB) int {
	t.Helper()
	pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "300"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	})
	return pid
}
