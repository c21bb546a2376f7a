// Package isolate is an isolated native sandbox's init and the daemon's
// side of talking to it.
//
// The native runtime starts the daemon's own binary again (re-executed
// through /proc/self/exe under the name Arg0, as runc's init and docker's
// reexec do) as the first process of new user, mount, PID, IPC, UTS and
// network namespaces. As PID 1 there it builds the sandbox's view of the
// files (the host's system directories read-only, the workspace
// read-write at its own path, a private /tmp, /dev and /proc, nothing
// else), brings up the loopback, drops every capability its children
// could get, starts the agent and then stays for the sandbox's life:
//
//   - it reaps every process of the sandbox (docker's --init, tini);
//   - it forwards the leased host port, whose listening socket the daemon
//     made in the host's network and handed it, to port AgentPort inside
//     (the forward lives with the sandbox, not with the daemon);
//   - it serves the daemon on a unix socket in the sandbox's directory
//     (outside the sandbox's view): exec a command inside, with the
//     descriptors the daemon passes (or a terminal of the sandbox's own
//     devpts whose master goes back), and dial a port inside, the
//     connected socket passed back (a preview). Daytona's toolbox
//     daemon plays this part in a Daytona sandbox.
//
// The init and the daemon speak JSON lines over the socket; descriptors
// ride on the first line of a request or an answer (SCM_RIGHTS).
package isolate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg0 is the name the init is started under: a binary that links this
// package runs the init instead of its main when started so.
const Arg0 = "agent-control-plane-init"

// AgentPort is the port the agent listens on inside every isolated
// sandbox: Daytona's.
const AgentPort = 4000

// Files in a sandbox's control directory (Config.Control), which only
// the daemon sees.
const (
	socketName = "init.sock"
	exitName   = "exit.json"
	rootName   = "root" // the mount point of the sandbox's root
)

// Config is what the daemon tells the init, on its descriptor 3.
type Config struct {
	// Control is the sandbox's control directory on the host, made by
	// the daemon (0700): the socket, the exit record and the root's
	// mount point are made in it.
	Control string `json:"control"`
	// Workspace is the workspace's path, the same inside as on the host.
	Workspace string `json:"workspace"`
	// Home, when set and not inside the workspace, gets an empty
	// private directory (tools write caches there).
	Home     string   `json:"home,omitempty"`
	Hostname string   `json:"hostname"`
	Argv     []string `json:"argv"`
	// Binds are the snapshot's extra binds.
	Binds []Bind `json:"binds,omitempty"`
	// Network: a tap device comes (pasta). AllowList, when set, keeps
	// routes to those networks only, set before the agent starts.
	Network   bool     `json:"network,omitempty"`
	AllowList []string `json:"allowList,omitempty"`
	// DNS, when set, is the address the sandbox's resolver is (pasta's
	// forward of the host's): an allow list keeps a route to it.
	DNS string `json:"dns,omitempty"`
	// Forward: descriptor 4 is a listening socket of the host to
	// forward to AgentPort.
	Forward bool `json:"forward,omitempty"`
}

// Bind is a directory (or file) of the host seen inside at Target.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// request is one line from the daemon.
type request struct {
	Op string `json:"op"` // "exec", "dial", "kill"

	// exec: descriptors 0, 1, 2 ride along unless TTY.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	TTY  bool     `json:"tty,omitempty"`
	Cols int      `json:"cols,omitempty"`
	Rows int      `json:"rows,omitempty"`

	// dial
	Port int `json:"port,omitempty"`
}

// answer is one line from the init.
type answer struct {
	Error string `json:"error,omitempty"`
	// NotFound: the program of an exec was not found (or cannot be run).
	NotFound bool `json:"notFound,omitempty"`
	// Refused: nothing listens on the dialled port.
	Refused bool  `json:"refused,omitempty"`
	PID     int   `json:"pid,omitempty"`
	Exit    *Exit `json:"exit,omitempty"`
}

// Exit is how a process inside ended.
type Exit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
}

// conn is one side of the socket: lines, and descriptors on the first
// line each side sends (one connection per exec or dial).
type conn struct {
	c     *net.UnixConn
	r     *bufio.Reader
	first bool       // the first read is done
	files []*os.File // what came with it, not yet taken
}

func newConn(c *net.UnixConn) *conn {
	x := &conn{c: c}
	x.r = bufio.NewReaderSize(x, 4096)
	return x
}

// Read is the socket's bytes; its first read takes the descriptors that
// ride on them.
func (c *conn) Read(b []byte) (int, error) {
	if c.first {
		return c.c.Read(b)
	}
	c.first = true
	oob := make([]byte, unix.CmsgSpace(4*8))
	n, oobn, _, _, err := c.c.ReadMsgUnix(b, oob)
	if oobn > 0 {
		c.files = parseRights(oob[:oobn])
	}
	return n, err
}

// maxLine bounds one line (an exec's argv and environment).
const maxLine = 4 << 20

// send writes v as one line, with files on it.
func (c *conn) send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if len(files) == 0 {
		_, err = c.c.Write(b)
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	// The descriptors go with the first bytes; a stream socket may take
	// fewer than all of a long line at once (sendmsg does not loop), and
	// Write sends the rest.
	n, _, err := c.c.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err == nil && n < len(b) {
		_, err = c.c.Write(b[n:])
	}
	return err
}

// recv reads one line into v, and returns the descriptors that came with
// the connection's first line (the caller owns them) the first time.
func (c *conn) recv(v any) ([]*os.File, error) {
	line, err := readLine(c.r)
	files := c.files
	c.files = nil
	if err == nil {
		err = json.Unmarshal(line, v)
	}
	if err != nil {
		closeFiles(files)
		return nil, err
	}
	return files, nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, more, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("a line of more than %d bytes", maxLine)
		}
		if !more {
			return line, nil
		}
	}
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// exitOf is how a wait status ended.
func exitOf(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	return Exit{Code: ws.ExitStatus()}
}

// withSocket calls f with a name of the control socket in directory dir
// that bind and connect take: its path, or, where that passes the 108
// bytes of sun_path (a sandbox's long name beneath a deep root), the
// same file reached through /proc/self/fd and a descriptor of dir.
func withSocket(dir string, f func(name string) error) error {
	name := filepath.Join(dir, socketName)
	if len(name) < len(unix.RawSockaddrUnix{}.Path) {
		return f(name)
	}
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return f("/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + socketName)
}
