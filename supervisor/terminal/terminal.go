// Package terminal keeps interactive terminals inside sandboxes: a
// command (a shell) on a pseudo-terminal, typed into and resized by
// whoever holds it, its output kept (a bounded backlog) for each client
// that attaches and sent to all attached as it comes — Daytona's PTY
// sessions and the CLI's exec -t.
package terminal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of one terminal.
const (
	// Backlog is how much of the latest output a terminal keeps for a
	// client that attaches later.
	Backlog = 64 << 10
	// MaxAttached is how many clients may be attached at once.
	MaxAttached = 4
	// queued is how many pieces of output may wait for one attached
	// client; one that falls further behind is detached (Attachment.Lagged).
	queued = 256
)

// Errors of a terminal.
var (
	ErrEnded = errors.New("the terminal's command has ended")
	ErrFull  = fmt.Errorf("the terminal has %d clients attached already", MaxAttached)
	// ErrNotStarted: input for a lazy terminal nobody attached to yet.
	ErrNotStarted = errors.New("the terminal starts when a client attaches to it")
)

// Spec is a terminal to open.
type Spec struct {
	ID         string
	Dir        string            // as the sandbox sees it; empty: its workspace
	Env        map[string]string // added to the sandbox's environment
	Cols, Rows int               // its first size; 0: 80 by 24
	Lazy       bool              // its command starts at the first Attach
}

// Start runs the terminal's command on a terminal of cols by rows inside
// the sandbox, reading stdin and writing all it prints to stdout.
type Start func(stdin io.Reader, stdout io.Writer, cols, rows int) (runtime.Terminal, error)

// Terminal is one command on a pseudo-terminal.
type Terminal struct {
	spec    Spec
	Created time.Time
	start   Start
	filter  func([]byte) []byte

	in, out *io.PipeWriter // in: typed to the command; out: what it prints, to fanOut
	outR    *io.PipeReader
	fanned  chan struct{} // closed when all output is passed on

	mu         sync.Mutex
	cols, rows int
	p          runtime.Terminal
	started    bool
	backlog    []byte
	attached   map[*Attachment]bool
	ended      chan struct{}
	exit       runtime.Exit
	err        error // why it could not start
}

// Info describes a terminal.
type Info struct {
	Spec
	Created time.Time
	Active  bool // its command runs (or, lazy, waits to)
}

// New opens a terminal; its command starts now unless spec.Lazy. filter,
// when set, is applied to each piece of output before anyone sees it
// (redaction).
func New(spec Spec, start Start, filter func([]byte) []byte) (*Terminal, error) {
	spec.Cols, spec.Rows = runtime.TerminalSize(spec.Cols, spec.Rows)
	spec.Env = maps.Clone(spec.Env)
	t := &Terminal{spec: spec, Created: time.Now(), start: start, filter: filter,
		cols: spec.Cols, rows: spec.Rows, attached: map[*Attachment]bool{}, ended: make(chan struct{})}
	if spec.Lazy {
		return t, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.startLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

// Start starts the command of a lazy terminal now (once; a terminal
// already started says how that went).
func (t *Terminal) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.startLocked()
}

// startLocked starts the command once.
func (t *Terminal) startLocked() error {
	if t.started {
		return t.err
	}
	t.started = true
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := t.start(inR, outW, t.cols, t.rows)
	if err != nil {
		t.err = err
		t.exit = runtime.Exit{Code: -1, Reason: err.Error()}
		close(t.ended)
		return err
	}
	t.p, t.in, t.out, t.outR, t.fanned = p, inW, outW, outR, make(chan struct{})
	go t.fanOut()
	go t.wait()
	return nil
}

// fanOut keeps what the command prints and passes it to the attached.
func (t *Terminal) fanOut() {
	defer close(t.fanned)
	buf := make([]byte, 32<<10)
	for {
		n, err := t.outR.Read(buf)
		if n > 0 {
			piece := append([]byte(nil), buf[:n]...)
			if t.filter != nil {
				piece = t.filter(piece)
			}
			t.publish(piece)
		}
		if err != nil {
			return
		}
	}
}

func (t *Terminal) publish(piece []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.backlog = append(t.backlog, piece...)
	if over := len(t.backlog) - Backlog; over > 0 {
		t.backlog = append(t.backlog[:0], t.backlog[over:]...)
	}
	for a := range t.attached {
		select {
		case a.c <- piece:
		default: // too far behind: let it go rather than hold the rest
			a.lagged = true
			t.detachLocked(a)
		}
	}
}

// wait ends the terminal when its command has ended and its output has
// been passed on.
func (t *Terminal) wait() {
	e, _ := t.p.Wait(context.Background())
	t.out.Close()
	t.in.Close()
	<-t.fanned
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exit = e
	for a := range t.attached {
		t.detachLocked(a)
	}
	close(t.ended)
}

// Attachment is one client attached to a terminal.
type Attachment struct {
	t      *Terminal
	c      chan []byte
	lagged bool
}

// Attach starts a lazy terminal's command and returns the output kept so
// far and a client that receives what comes next, until Detach or the
// command's end. At most MaxAttached at once (ErrFull).
func (t *Terminal) Attach() ([]byte, *Attachment, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.startLocked(); err != nil {
		return nil, nil, err
	}
	a := &Attachment{t: t, c: make(chan []byte, queued)}
	select {
	case <-t.ended:
		close(a.c)
		return append([]byte(nil), t.backlog...), a, nil
	default:
	}
	if len(t.attached) >= MaxAttached {
		return nil, nil, ErrFull
	}
	t.attached[a] = true
	return append([]byte(nil), t.backlog...), a, nil
}

// Output is the terminal's output from Attach on; it is closed at the
// command's end, at Detach, and when the client fell behind (Lagged).
func (a *Attachment) Output() <-chan []byte { return a.c }

// Lagged reports whether the client was let go for falling behind.
func (a *Attachment) Lagged() bool {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	return a.lagged
}

// Detach lets the client go; the terminal runs on.
func (a *Attachment) Detach() {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	a.t.detachLocked(a)
}

func (t *Terminal) detachLocked(a *Attachment) {
	if t.attached[a] {
		delete(t.attached, a)
		close(a.c)
	}
}

// Write types p into the terminal. It waits while the command does not
// read, and fails once it has ended.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	in := t.in
	t.mu.Unlock()
	if in == nil {
		return 0, ErrNotStarted
	}
	n, err := in.Write(p)
	if err != nil {
		return n, ErrEnded
	}
	return n, nil
}

// Resize sets the terminal's size (each side 1 to runtime.MaxTerminalSide).
func (t *Terminal) Resize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > runtime.MaxTerminalSide || rows > runtime.MaxTerminalSide {
		return fmt.Errorf("a terminal is 1 to %d columns by 1 to %d rows, not %d by %d", runtime.MaxTerminalSide, runtime.MaxTerminalSide, cols, rows)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.ended:
		return ErrEnded
	default:
	}
	if t.p != nil {
		if err := t.p.Resize(cols, rows); err != nil {
			return err
		}
	}
	t.cols, t.rows = cols, rows
	return nil
}

// Close ends the command (SIGKILL to its process group) and waits, a
// moment at most, for its end.
func (t *Terminal) Close() {
	t.mu.Lock()
	p := t.p
	if !t.started {
		t.started, t.err = true, ErrEnded
		close(t.ended)
	}
	t.mu.Unlock()
	if p != nil {
		_ = p.Kill()
		select {
		case <-t.ended:
		case <-time.After(5 * time.Second):
		}
	}
}

// Ended is closed once the command has ended (or could not start).
func (t *Terminal) Ended() <-chan struct{} { return t.ended }

// Exit is how the command ended; call it after Ended.
func (t *Terminal) Exit() runtime.Exit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit
}

// Info describes the terminal now.
func (t *Terminal) Info() Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := Info{Spec: t.spec, Created: t.Created, Active: true}
	i.Env = maps.Clone(t.spec.Env)
	i.Cols, i.Rows = t.cols, t.rows
	select {
	case <-t.ended:
		i.Active = false
	default:
	}
	return i
}
