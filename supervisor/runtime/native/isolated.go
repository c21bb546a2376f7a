package native

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native/isolate"
)

// Isolation is how the native runtime isolates its sandboxes: each in new
// user, mount, PID, IPC, UTS and network namespaces around an init of
// the daemon's own (package isolate).
type Isolation struct {
	// Default is the mode of a sandbox whose snapshot does not ask:
	// runtime.IsolationNamespaces or runtime.IsolationOff (the zero
	// value).
	Default string
	// Pasta is the path of pasta (Debian's passt), which gives isolated
	// sandboxes the outside network; empty: they have none.
	Pasta string
	// Init is the program an isolated sandbox's init runs
	// (agent-control-plane-init); empty: this binary again, under the
	// init's name.
	Init string
}

// ControlDir is the directory in a sandbox's directory that only the
// daemon and the sandbox's init see: the init's socket, the agent's exit
// record, the mount point of the sandbox's root.
const ControlDir = ".init"

// namespaces are the ones an isolated sandbox gets.
const namespaces = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWNET

// Probe says whether this user may make the namespaces an isolated
// sandbox needs: nil, or why not. It starts true(1) in them.
func Probe() error {
	path, err := osexec.LookPath("true")
	if err != nil {
		return err
	}
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:  namespaces,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}},
	}}
	pid, err := syscall.ForkExec(path, []string{"true"}, attr)
	if err != nil {
		return fmt.Errorf("the kernel refuses new namespaces to this user: %w", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return err
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("a probe in new namespaces ended %v", ws)
	}
	return nil
}

// mode is the isolation spec gets, or why it cannot get what it asks.
func (n *Runtime) mode(spec runtime.Spec) (string, error) {
	mode := spec.Isolation
	if mode == "" {
		mode = n.Isolation.Default
	}
	switch mode {
	case runtime.IsolationNamespaces:
		if n.Isolation.Default != runtime.IsolationNamespaces && n.isolationRefused != nil {
			return "", fmt.Errorf("%w: the snapshot asks for isolation, which this machine refuses: %v", runtime.ErrIsolationUnsupported, n.isolationRefused)
		}
	case "", runtime.IsolationOff:
		mode = runtime.IsolationOff
		if !spec.Network.IsZero() {
			return "", fmt.Errorf("%w: networkBlockAll and networkAllowList need an isolated sandbox; this one shares the host's network (isolation is off)", runtime.ErrNetworkUnsupported)
		}
		if len(spec.Mounts) > 0 {
			return "", fmt.Errorf("%w: volumes are mounted into isolated sandboxes only; this one sees the host's files as they are (isolation is off)", runtime.ErrIsolationUnsupported)
		}
	default:
		return "", fmt.Errorf("%w: unknown isolation %q", runtime.ErrIsolationUnsupported, mode)
	}
	return mode, nil
}

// isolatedSpec is ps made to start the init (Isolation.Init, or this binary),
// in new namespaces, with its configuration socket and the leased port's
// listening socket. It returns the daemon's end of the socket, what
// to close once the init is spawned, and what the init is told.
func (n *Runtime) isolatedSpec(spec runtime.Spec, ps *proc.Spec, argv []string) (*os.File, []*os.File, isolate.Config, error) {
	control := filepath.Join(spec.Dir, ControlDir)
	if err := isolate.Prepare(control); err != nil {
		return nil, nil, isolate.Config{}, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, isolate.Config{}, err
	}
	mine := os.NewFile(uintptr(fds[0]), "init-config")
	extra := []*os.File{os.NewFile(uintptr(fds[1]), "init-config")}
	made := false
	defer func() {
		if !made {
			mine.Close()
			closeFiles(extra)
		}
	}()
	if spec.Port > 0 {
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: spec.Port})
		if err != nil {
			return nil, nil, isolate.Config{}, fmt.Errorf("listen on the leased port %d: %w", spec.Port, err)
		}
		f, err := ln.File()
		ln.Close() // f holds the socket
		if err != nil {
			return nil, nil, isolate.Config{}, err
		}
		extra = append(extra, f)
	}
	home := ""
	for _, kv := range ps.Env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	cfg := isolate.Config{
		Control: control, Workspace: spec.Workspace, Home: home, Hostname: hostname(spec.ID),
		Argv: argv, Binds: n.binds(spec, argv, ps.Env), Forward: spec.Port > 0,
		Network: n.Isolation.Pasta != "" && !spec.Network.BlockAll, AllowList: spec.Network.AllowList,
	}
	if cfg.Network && loopbackResolver(hostResolvConf) {
		// The host's resolver is on its loopback (systemd-resolved's
		// 127.0.0.53), which the sandbox's is not: the sandbox asks
		// pasta's DNS address instead, which asks the host's resolver.
		conf := filepath.Join(control, "resolv.conf")
		if err := os.WriteFile(conf, []byte("nameserver "+DNSForward+"\n"), 0o644); err != nil {
			return nil, nil, isolate.Config{}, err
		}
		cfg.Binds = append(cfg.Binds, isolate.Bind{Source: conf, Target: hostResolvConf, ReadOnly: true})
		cfg.DNS = DNSForward
	}
	b, _ := json.Marshal(cfg)
	if _, err := mine.Write(append(b, '\n')); err != nil { // a socket's buffer holds it before the init reads
		return nil, nil, isolate.Config{}, err
	}
	ps.Path, ps.Argv, ps.Dir = cmp.Or(n.Isolation.Init, "/proc/self/exe"), []string{isolate.Arg0}, "/"
	ps.ExtraFiles = extra
	ps.Namespaces = &proc.Namespaces{Flags: namespaces, UID: os.Geteuid(), GID: os.Getegid()}
	made = true
	return mine, extra, cfg, nil
}

// binds are what the workload sees of the host besides the system
// directories and its workspace: its program, found in the PATH of env
// as the workload would, when that lies elsewhere (a daemon's bundled
// agent, a binary in the user's home), and the snapshot's binds.
func (n *Runtime) binds(spec runtime.Spec, argv, env []string) []isolate.Bind {
	var out []isolate.Bind
	if len(argv) > 0 {
		if prog, ok := unseen(argv[0], env, spec.Workspace); ok {
			out = append(out, isolate.Bind{Source: prog, Target: prog, ReadOnly: true})
		}
	}
	for _, m := range spec.Mounts { // volumes
		out = append(out, isolate.Bind{Source: m.Source, Target: m.Target})
	}
	for _, b := range spec.Binds {
		t := b.Target
		if t == "" {
			t = b.Source
		}
		out = append(out, isolate.Bind{Source: b.Source, Target: t, ReadOnly: b.ReadOnly})
	}
	return out
}

// unseen is the program file names on the host, when the sandbox would
// not find it by itself: found in env's PATH (or named by its path), and
// no directory of that PATH the sandbox sees (its system directories,
// its workspace) holds one by that name first. python3 is the host's
// /usr/bin/python3 inside even when the user's PATH puts a pyenv shim
// first; a binary found only in the user's home is bound.
func unseen(file string, env []string, workspace string) (string, bool) {
	seen := func(p string) bool { return under(p, isolate.SystemDirs...) || under(p, workspace) }
	if strings.Contains(file, "/") {
		return file, filepath.IsAbs(file) && !seen(file)
	}
	first := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range filepath.SplitList(v) {
				p := filepath.Join(dir, file)
				if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || !filepath.IsAbs(p) {
					continue
				}
				if seen(p) {
					return "", false
				}
				if first == "" {
					first = p
				}
			}
		}
	}
	return first, first != ""
}

func under(path string, dirs ...string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// hostname is a sandbox's hostname: its id, cut to what a UTS name
// holds.
func hostname(id string) string {
	if len(id) > 63 {
		id = id[:63]
	}
	return id
}

// startNetwork starts pasta for the init's network namespace: it gives
// the sandbox the outside network (NAT through the host's sockets),
// forwards no port either way (the leased port is the init's), and does
// not map the gateway to the host's loopback. It carries the sandbox's
// marker but lives outside its cgroup: its exit tears its tap device
// down, which waits on the kernel for tens of milliseconds, and the
// sandbox's end does not wait for that; the end kills it by its marker
// (as a sweep after a daemon restart does).
func (n *Runtime) startNetwork(spec runtime.Spec, cfg isolate.Config, pid int) error {
	argv := []string{"pasta", "--config-net", "--foreground", "--quiet", "--tcp-ports", "none", "--udp-ports", "none",
		"--tcp-ns", "none", "--udp-ns", "none", "--no-map-gw"}
	if len(spec.Network.AllowList) > 0 {
		argv = append(argv, "--ipv4-only") // the allow list is IPv4 CIDRs
	}
	if os.Geteuid() == 0 {
		argv = append(argv, "--runas", "0") // it would drop to nobody, who may not enter the namespaces
	}
	if cfg.DNS != "" {
		argv = append(argv, "--dns-forward", cfg.DNS)
	}
	argv = append(argv, strconv.Itoa(pid))
	ps := proc.Spec{Path: n.Isolation.Pasta, Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/",
		Stdout: spec.Stderr, Stderr: spec.Stderr, Marker: spec.Marker}
	_, err := n.Watcher.Spawn(ps)
	return err
}

// hostResolvConf is the host's resolver configuration, which an isolated
// sandbox sees as its own (/etc is the host's).
const hostResolvConf = "/etc/resolv.conf"

// DNSForward is the address an isolated sandbox sends its DNS queries to
// when the host's resolver listens on the host's loopback: pasta answers
// them from that resolver (--dns-forward).
const DNSForward = "169.254.1.53"

// loopbackResolver reports whether every nameserver resolv.conf at path
// names is on a loopback address (none named: the resolver's default,
// the loopback too).
func loopbackResolver(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if ip := net.ParseIP(f[1]); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// awaitIsolated gives the spawned init its network and waits until it
// has set the sandbox up and started the agent; on failure the init is
// gone when it returns.
func (n *Runtime) awaitIsolated(ctx context.Context, spec runtime.Spec, cfg isolate.Config, p *proc.Process, g *cgroup.Group, config *os.File) error {
	var err error
	if cfg.Network {
		err = n.startNetwork(spec, cfg, p.Identity().PID)
	}
	if err == nil {
		err = awaitInit(ctx, config)
	}
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = p.Stop(sctx, 0)
		n.Watcher.KillMarked(spec.Marker) // its pasta
		if g != nil {
			_ = g.Kill()
			if empty, werr := g.End(); werr == nil {
				select {
				case <-empty:
				case <-sctx.Done():
				}
			}
		}
	}
	return err
}

// endRemains kills what is left of a sandbox whose leader is gone (its
// pasta, by its marker; whatever is in its cgroup) and waits a moment for
// the cgroup to empty, so that the handle Adopt returns ends at once, as
// one of a sandbox that ended while the daemon was away should.
func (n *Runtime) endRemains(g *cgroup.Group, marker string) {
	n.Watcher.KillMarked(marker)
	if populated, err := g.Populated(); err != nil || !populated {
		return
	}
	empty, err := g.End()
	if err != nil {
		return
	}
	select {
	case <-empty:
	case <-time.After(2 * time.Second):
	}
}

// awaitInit reads the init's word that the sandbox is set up and its
// agent started.
func awaitInit(ctx context.Context, f *os.File) error {
	deadline := time.Now().Add(isolate.NetworkWait + 10*time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = f.SetReadDeadline(deadline)
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("the sandbox's init said nothing: %w", err)
	}
	var r struct {
		Error    string `json:"error"`
		NotFound bool   `json:"notFound"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("the sandbox's init: %w", err)
	}
	if r.NotFound {
		return fmt.Errorf("%w: %s (an isolated sandbox sees the host's system directories, its workspace and its own program; a snapshot's mounts add more)", runtime.ErrProgramNotFound, r.Error)
	}
	if r.Error != "" {
		return fmt.Errorf("set up the isolated sandbox: %s", r.Error)
	}
	return nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// leaderExit is how the leader ended; for an isolated sandbox, how its
// agent did, as its init recorded it (the init mirrors the agent's end,
// but an adopted init's status goes to its parent).
func (h *handle) leaderExit() runtime.Exit {
	e := exitOf(h.p)
	if r, ok := h.recordedExit(); ok {
		e.Unknown, e.Code, e.Signal = false, r.Code, r.Signal
	}
	return e
}

func (h *handle) recordedExit() (runtime.Exit, bool) {
	if h.init == nil {
		return runtime.Exit{}, false
	}
	r, ok := isolate.ReadExit(h.init.Control)
	return runtime.Exit{Code: r.Code, Signal: unix.Signal(r.Signal)}, ok
}

// Isolation says whether the sandbox runs in namespaces of its own.
func (h *handle) Isolation() string {
	if h.init != nil {
		return runtime.IsolationNamespaces
	}
	return runtime.IsolationOff
}

// DialPort connects to port inside an isolated sandbox, through its init;
// to a plain sandbox's port on the loopback (PortEndpoint's rule).
func (h *handle) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if h.init == nil {
		ep, err := h.PortEndpoint(ctx, port)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port)))
	}
	c, err := h.init.Dial(ctx, port)
	if errors.Is(err, isolate.ErrRefused) {
		return nil, fmt.Errorf("%w: %v", runtime.ErrNotListening, err)
	}
	return c, err
}

// execInside runs spec through the sandbox's init: in all of its
// namespaces and its cgroup, as a child of its PID 1.
func (h *handle) execInside(ctx context.Context, spec runtime.ExecSpec, env []string) (runtime.Process, error) {
	req := isolate.ExecRequest{Argv: spec.Argv, Env: env, Dir: h.execDir(spec), TTY: spec.TTY}
	req.Cols, req.Rows = runtime.TerminalSize(spec.Cols, spec.Rows)
	var pipes *stdio
	if !spec.TTY {
		var err error
		if pipes, err = newStdio(spec); err != nil {
			return nil, err
		}
		req.Stdio = pipes.child
	}
	cmd, err := h.init.Exec(ctx, req)
	if pipes != nil {
		pipes.closeChild()
	}
	if err != nil {
		if pipes != nil {
			pipes.closeParent()
		}
		if errors.Is(err, isolate.ErrNotFound) {
			return nil, fmt.Errorf("%w: %w: %v", runtime.ErrExecStart, runtime.ErrProgramNotFound, err)
		}
		return nil, fmt.Errorf("%w: %v", runtime.ErrExecStart, err)
	}
	if spec.TTY {
		pipes = &stdio{out: [2]*os.File{cmd.Terminal}, pty: cmd.Terminal}
	}
	x := &execProc{p: inside{cmd}, Ending: runtime.NewEnding()}
	copied := pipes.copy(spec)
	go x.run(ctx, spec.Timeout, copied, pipes.closeOutputs, func() {})
	if spec.TTY {
		return &terminal{execProc: x, pty: cmd.Terminal}, nil
	}
	return x, nil
}

// inside is a command an isolated sandbox's init started.
type inside struct{ c *isolate.Cmd }

func (i inside) Done() <-chan struct{} { return i.c.Done() }
func (i inside) kill() error           { return i.c.Kill() }
func (i inside) exit() runtime.Exit {
	e, err := i.c.Exit()
	if err != nil {
		return runtime.Exit{Unknown: true, At: time.Now()}
	}
	return runtime.Exit{Code: e.Code, Signal: syscall.Signal(e.Signal), At: time.Now()}
}

// portListening reports whether a process of the isolated sandbox
// listens on port: its network namespace is its own, so any listener
// in it is the sandbox's.
func (h *handle) portListening(port int) (bool, error) {
	return proc.ListeningIn(h.id.PID, port)
}
