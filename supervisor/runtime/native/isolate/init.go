package isolate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goruntime "runtime"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0 {
		os.Exit(Main())
	}
}

// Descriptors the daemon hands the init.
const (
	fdConfig  = 3 // a socket: the Config as one line in, "ok" or the error out
	fdForward = 4 // with Config.Forward: the host's listening socket
)

// setupFailed is the init's exit code when the sandbox could not be set up.
const setupFailed = 125

// ready is the init's one line back to the daemon on fdConfig.
type ready struct {
	Error    string `json:"error,omitempty"`
	NotFound bool   `json:"notFound,omitempty"` // the agent's program is not there
}

// Main is the init: set up, start the agent, serve, and end with it.
func Main() int {
	// A stop's signals to the group are the agent's: the init stays for
	// it (Go's own handlers would end it, and the namespace with it).
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT)
	cf := os.NewFile(fdConfig, "config")
	var cfg Config
	if err := json.NewDecoder(io.LimitReader(cf, maxLine)).Decode(&cfg); err != nil || len(cfg.Argv) == 0 {
		fmt.Fprintf(os.Stderr, "sandbox init: read the configuration: %v (argv %q)\n", err, cfg.Argv)
		return setupFailed
	}
	in, err := setUp(cfg)
	if err == nil {
		err = in.startAgent(cfg)
	}
	if err != nil {
		_ = json.NewEncoder(cf).Encode(ready{Error: err.Error(), NotFound: errors.Is(err, ErrNotFound)})
		fmt.Fprintf(os.Stderr, "sandbox init: %v\n", err)
		return setupFailed
	}
	_ = json.NewEncoder(cf).Encode(ready{})
	cf.Close()
	if cfg.Forward {
		go in.forward(os.NewFile(fdForward, "forward"))
	}
	go in.serve()
	exit := <-in.agentDone
	in.recordExit(exit)
	return exit.Code
}

// initState is the running init.
type initState struct {
	control   *os.File // the control directory, opened before the pivot
	ln        *net.UnixListener
	reap      *reaper
	agentDone chan Exit
}

// setUp builds the sandbox around the init: the control socket (made
// before the pivot, in the host's view), the files, the hostname, the
// network, and no capability for what it starts.
func setUp(cfg Config) (*initState, error) {
	in := &initState{agentDone: make(chan Exit, 1), reap: newReaper()}
	var err error
	if in.control, err = os.Open(cfg.Control); err != nil {
		return nil, fmt.Errorf("open the control directory: %w", err)
	}
	_ = os.Remove(filepath.Join(cfg.Control, socketName)) // an earlier init's, of this sandbox
	if err := withSocket(cfg.Control, func(sock string) (err error) {
		in.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on the control socket: %w", err)
	}
	in.ln.SetUnlinkOnClose(false)
	if err := buildRoot(cfg); err != nil {
		return nil, err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return nil, fmt.Errorf("set the hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, fmt.Errorf("bring up the loopback: %w", err)
	}
	// An allow list must be in place before anything runs that could
	// use the network pasta brings; without one, the agent starts while
	// pasta comes up (a few milliseconds, which a create would otherwise
	// wait for).
	if cfg.Network && len(cfg.AllowList) > 0 {
		if err := awaitNetwork(cfg.AllowList, cfg.DNS); err != nil {
			return nil, err
		}
	}
	if err := in.reap.reap(); err != nil {
		return nil, fmt.Errorf("drop capabilities: %w", err)
	}
	return in, nil
}

// startAgent starts the agent in the init's process group (a stop's
// signal to the group reaches it), its output the init's.
func (in *initState) startAgent(cfg Config) error {
	argv0, err := LookPath(cfg.Argv[0], os.Environ())
	if err != nil {
		return err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	attr := &syscall.ProcAttr{Dir: cfg.Workspace, Env: os.Environ(), Files: []uintptr{null.Fd(), 1, 2}}
	_, err = in.reap.start(argv0, cfg.Argv, attr, func(e Exit) { in.agentDone <- e })
	return err
}

// recordExit writes how the agent ended where the daemon reads it (an
// adopted init's status goes to its parent, which may not be the daemon).
func (in *initState) recordExit(e Exit) {
	b, _ := json.Marshal(e)
	dir := int(in.control.Fd())
	tmp := exitName + ".tmp"
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, b)
	unix.Close(fd)
	_ = unix.Renameat(dir, tmp, dir, exitName)
}

// reaper starts and waits for every process of the sandbox: the init is
// its PID 1.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]func(Exit)
	forks   chan func() // run on the thread without capabilities
	dropped chan error  // that thread's word that it has none
}

// newReaper starts the reaper and the one thread every process of the
// sandbox is forked from. Capabilities and no_new_privs belong to a
// thread, not a process: that thread drops them, and a fork from any
// other (Go moves goroutines between threads) would hand on the init's.
//
// The thread starts at once, beside the sandbox's set-up; reap waits for
// it and starts reaping.
func newReaper() *reaper {
	r := &reaper{waiting: map[int]func(Exit){}, forks: make(chan func()), dropped: make(chan error, 1)}
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the init
		err := dropCapabilities()
		r.dropped <- err
		if err != nil {
			return
		}
		for f := range r.forks {
			f()
		}
	}()
	return r
}

// reap waits until the fork thread has dropped its capabilities, then
// reaps every child that ends. Nothing may be waited for by its own
// caller from then on (what ran before, ip, was).
func (r *reaper) reap() error {
	if err := <-r.dropped; err != nil {
		return err
	}
	ch := make(chan os.Signal, 64)
	signal.Notify(ch, unix.SIGCHLD)
	go func() {
		for range ch {
			r.reapAll()
		}
	}()
	return nil
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		// A child of start's that ended at once is reaped here before
		// start has registered it; start holds mu from the fork until
		// it has, so the lookup waits for that. What is not found is an
		// orphan the init inherited.
		r.mu.Lock()
		f, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			go f(exitOf(ws))
		}
	}
}

// start forks argv and calls done with how it ended.
func (r *reaper) start(path string, argv []string, attr *syscall.ProcAttr, done func(Exit)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var (
		pid    int
		err    error
		forked = make(chan struct{})
	)
	r.forks <- func() { pid, err = syscall.ForkExec(path, argv, attr); close(forked) }
	<-forked
	if err != nil {
		return 0, err
	}
	r.waiting[pid] = done
	return pid, nil
}

// serve answers the daemon's connections on the control socket.
func (in *initState) serve() {
	for {
		c, err := in.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go in.handle(newConn(c))
	}
}

func (in *initState) handle(c *conn) {
	defer c.c.Close()
	var req request
	files, err := c.recv(&req)
	if err != nil {
		return
	}
	defer closeFiles(files)
	switch req.Op {
	case "exec":
		in.exec(c, req, files)
	case "dial":
		in.dial(c, req.Port)
	default:
		_ = c.send(answer{Error: "unknown request " + strconv.Quote(req.Op)})
	}
}

// exec starts a command in a session of its own and reports its pid, then
// its end; a "kill" line from the daemon kills its process group.
func (in *initState) exec(c *conn, req request, files []*os.File) {
	if len(req.Argv) == 0 || !req.TTY && len(files) != 3 {
		_ = c.send(answer{Error: "an exec needs a command and, without a terminal, three descriptors"})
		return
	}
	argv0, err := LookPath(req.Argv[0], req.Env)
	if err != nil {
		_ = c.send(answer{Error: strings.TrimPrefix(err.Error(), ErrNotFound.Error()+": "), NotFound: true})
		return
	}
	attr := &syscall.ProcAttr{Dir: req.Dir, Env: req.Env, Sys: &syscall.SysProcAttr{Setsid: true}}
	var master *os.File
	if req.TTY {
		m, tty, err := pty.Open()
		if err != nil {
			_ = c.send(answer{Error: "open a terminal: " + err.Error()})
			return
		}
		// The command's side: closed here once it is started (or not),
		// so that its end is the terminal's.
		defer tty.Close()
		files = append(files, tty)
		master = m
		defer master.Close()
		cols, rows := req.Cols, req.Rows
		if cols <= 0 || rows <= 0 {
			cols, rows = 80, 24
		}
		_ = pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
		attr.Files = []uintptr{tty.Fd(), tty.Fd(), tty.Fd()}
		attr.Sys.Setctty = true
	} else {
		attr.Files = []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()}
	}
	ended := make(chan Exit, 1)
	pid, err := in.reap.start(argv0, req.Argv, attr, func(e Exit) { ended <- e })
	if err != nil {
		notFound := errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOEXEC)
		_ = c.send(answer{Error: err.Error(), NotFound: notFound})
		return
	}
	closeFiles(files) // the command has them (and a terminal's side); the daemon's ends stay the daemon's
	var sent []*os.File
	if master != nil {
		sent = []*os.File{master}
	}
	if err := c.send(answer{PID: pid}, sent...); err != nil {
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	var (
		mu   sync.Mutex
		gone bool // reaped: its pid may be another's
	)
	go func() {
		var line request
		for {
			if _, err := c.recv(&line); err != nil {
				return
			}
			if line.Op == "kill" {
				mu.Lock()
				if !gone {
					_ = unix.Kill(-pid, unix.SIGKILL)
				}
				mu.Unlock()
			}
		}
	}()
	e := <-ended
	mu.Lock()
	gone = true
	mu.Unlock()
	_ = c.send(answer{Exit: &e})
}

// dial connects to port inside and passes the connection back.
func (in *initState) dial(c *conn, port int) {
	if port < 1 || port > 65535 {
		_ = c.send(answer{Error: "not a TCP port: " + strconv.Itoa(port)})
		return
	}
	tc, err := dialInside(port)
	if err != nil {
		_ = c.send(answer{Error: err.Error(), Refused: errors.Is(err, unix.ECONNREFUSED)})
		return
	}
	defer tc.Close()
	f, err := tc.File()
	if err != nil {
		_ = c.send(answer{Error: err.Error()})
		return
	}
	defer f.Close()
	_ = c.send(answer{}, f)
}

// dialInside connects to port on the sandbox's loopback, IPv4 first.
func dialInside(port int) (*net.TCPConn, error) {
	var last error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		last = err
	}
	return nil, last
}

// forward accepts on the host's listening socket and joins each
// connection to the agent's port inside; one the agent does not take is
// reset, as a port nobody listens on would be refused.
func (in *initState) forward(f *os.File) {
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox init: the forwarded port: %v\n", err)
		return
	}
	forward(ln, AgentPort, MaxForwards)
}

// MaxForwards bounds the connections the init forwards at once: anyone on
// the host's loopback can open them, and each holds two descriptors and
// two goroutines of the init. One past it is reset.
const MaxForwards = 1024

// forward joins each connection ln accepts to port inside, at most max at
// once.
func forward(ln net.Listener, port, max int) {
	slots := make(chan struct{}, max)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case slots <- struct{}{}:
			go func() {
				join(c.(*net.TCPConn), port)
				<-slots
			}()
		default:
			reset(c.(*net.TCPConn))
		}
	}
}

// reset closes c with a reset, as a port nobody listens on refuses.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	c.Close()
}

func join(outer *net.TCPConn, port int) {
	inner, err := dialInside(port)
	if err != nil {
		reset(outer)
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src *net.TCPConn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
	}
	wg.Add(2)
	go pipe(inner, outer)
	go pipe(outer, inner)
	wg.Wait()
	inner.Close()
	outer.Close()
}

// LookPath finds file as a process with environment env would: in its
// PATH, as the sandbox sees its files.
func LookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not in its PATH", ErrNotFound, file)
}
