package isolate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Errors of the daemon's side.
var (
	// ErrNotFound: the program of an exec was not found inside.
	ErrNotFound = errors.New("program not found in the sandbox")
	// ErrRefused: nothing inside listens on the dialled port.
	ErrRefused = errors.New("nothing in the sandbox listens on that port")
)

// Init is the daemon's side of one sandbox's init.
type Init struct {
	Control string // the control directory
	PID     int    // the init's pid, as the daemon sees it
}

// connect opens a connection to the init and checks that the peer is the
// init the daemon pinned (its pid, which cannot be reused while pinned).
func (in Init) connect(ctx context.Context) (*conn, error) {
	var d net.Dialer
	var c net.Conn
	err := withSocket(in.Control, func(sock string) (err error) {
		c, err = d.DialContext(ctx, "unix", sock)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reach the sandbox's init: %w", err)
	}
	uc := c.(*net.UnixConn)
	raw, err := uc.SyscallConn()
	var cred *unix.Ucred
	if err == nil {
		cerr := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
		if err == nil {
			err = cerr
		}
	}
	if err == nil && int(cred.Pid) != in.PID {
		err = fmt.Errorf("the control socket is served by pid %d, not the sandbox's init %d", cred.Pid, in.PID)
	}
	if err != nil {
		uc.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	return newConn(uc), nil
}

// Dial connects to port on the sandbox's loopback.
func (in Init) Dial(ctx context.Context, port int) (net.Conn, error) {
	c, err := in.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.c.Close()
	if err := c.send(request{Op: "dial", Port: port}); err != nil {
		return nil, err
	}
	var a answer
	files, err := c.recv(&a)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's init: %w", err)
	}
	defer closeFiles(files)
	switch {
	case a.Refused:
		return nil, fmt.Errorf("%w: port %d: %s", ErrRefused, port, a.Error)
	case a.Error != "":
		return nil, errors.New(a.Error)
	case len(files) != 1:
		return nil, errors.New("the sandbox's init passed no connection")
	}
	return net.FileConn(files[0])
}

// ExecRequest is a command to start inside.
type ExecRequest struct {
	Argv, Env  []string
	Dir        string
	TTY        bool
	Cols, Rows int
	// Stdio are the command's stdin, stdout and stderr without TTY.
	Stdio [3]*os.File
}

// Cmd is a command the init started.
type Cmd struct {
	PID int
	// Terminal is the master of its terminal, with TTY; the caller
	// closes it.
	Terminal *os.File
	c        *conn
	done     chan struct{}
	exit     Exit
	err      error
}

// Exec starts req inside and returns once it runs. The connection lives
// until the command ends: ctx bounds only the start.
func (in Init) Exec(ctx context.Context, req ExecRequest) (*Cmd, error) {
	c, err := in.connect(ctx)
	if err != nil {
		return nil, err
	}
	_ = c.c.SetDeadline(time.Time{})
	var files []*os.File
	if !req.TTY {
		files = req.Stdio[:]
	}
	r := request{Op: "exec", Argv: req.Argv, Env: req.Env, Dir: req.Dir, TTY: req.TTY, Cols: req.Cols, Rows: req.Rows}
	if err := c.send(r, files...); err != nil {
		c.c.Close()
		return nil, err
	}
	var a answer
	got, err := c.recv(&a)
	switch {
	case err != nil:
		err = fmt.Errorf("the sandbox's init: %w", err)
	case a.NotFound:
		err = fmt.Errorf("%w: %s", ErrNotFound, a.Error)
	case a.Error != "":
		err = errors.New(a.Error)
	case req.TTY && len(got) != 1:
		err = errors.New("the sandbox's init passed no terminal")
	}
	if err != nil {
		closeFiles(got)
		c.c.Close()
		return nil, err
	}
	x := &Cmd{PID: a.PID, c: c, done: make(chan struct{})}
	if req.TTY {
		x.Terminal = got[0]
	}
	go x.wait()
	return x, nil
}

func (x *Cmd) wait() {
	defer close(x.done)
	defer x.c.c.Close()
	var a answer
	if _, err := x.c.recv(&a); err != nil || a.Exit == nil {
		x.err = fmt.Errorf("the sandbox's init did not say how the command ended: %v", err)
		return
	}
	x.exit = *a.Exit
}

// Done is closed once the command has ended (or the init has gone).
func (x *Cmd) Done() <-chan struct{} { return x.done }

// Exit is how it ended, after Done; an error when the init went first.
func (x *Cmd) Exit() (Exit, error) { return x.exit, x.err }

// Kill kills the command's process group.
func (x *Cmd) Kill() error {
	select {
	case <-x.done:
		return nil
	default:
	}
	if err := x.c.send(request{Op: "kill"}); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.EPIPE) {
		return err
	}
	return nil
}

// ReadExit reads how the agent of the sandbox with control directory
// control ended, as its init recorded it; false when it did not.
func ReadExit(control string) (Exit, bool) {
	b, err := os.ReadFile(filepath.Join(control, exitName))
	var e Exit
	if err != nil || json.Unmarshal(b, &e) != nil {
		return Exit{}, false
	}
	return e, true
}

// Prepare makes the control directory control (0700) for a new init:
// the mount point of its root, and no record of an earlier run's end.
func Prepare(control string) error {
	if err := os.MkdirAll(filepath.Join(control, rootName), 0o700); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(control, exitName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
