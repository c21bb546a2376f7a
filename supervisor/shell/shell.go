// Package shell keeps a shell running inside a sandbox and runs commands
// in it one after another, so that what one command changes of the
// shell's state (its directory, its variables) the next one sees: the
// toolbox's sessions. Each command's output is told apart by markers only
// the daemon knows, and kept (its tail, bounded) for its logs.
//
// This file is long because a session's markers, its input and the
// framing of its output are one protocol, each part relying on the
// others.
package shell

import (
	"container/list"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Argv is the shell a session runs (looked up in the sandbox's PATH).
var Argv = []string{"sh"}

// Bounds of one session.
const (
	// MaxKept is how many finished commands a session remembers.
	MaxKept = 100
	// MaxQueued is how many commands may wait for the shell.
	MaxQueued = 32
	// MaxOutput is the tail of each command's output kept, per stream
	// and combined.
	MaxOutput = 1 << 20
	// MaxLine bounds one command line.
	MaxLine = 64 << 10
	// MaxPendingInput bounds the input sent to a command and not yet read
	// by it: past it, Input is refused at once (ErrInputFull) instead of
	// waiting on a command that does not read.
	MaxPendingInput = 1 << 20
	// maxWrites bounds the writes waiting for the shell's input (command
	// lines, input, the drains after commands).
	maxWrites = 64
)

// Errors a session returns.
var (
	ErrClosed   = errors.New("the session has ended")
	ErrBusy     = errors.New("too many commands are waiting in this session")
	ErrNoSuch   = errors.New("no such command in this session")
	ErrFinished = errors.New("the command has finished")
	// ErrNotStarted: input for a command that still waits its turn.
	ErrNotStarted = errors.New("the command has not started yet")
	// ErrInputFull: the command has not read the input sent before.
	ErrInputFull = fmt.Errorf("the command has not read its input yet (at most %d bytes wait for it)", MaxPendingInput)
)

// Start runs the session's shell inside the sandbox (an exec of Argv):
// it is given the shell's input and its two outputs and returns once the
// shell runs.
type Start func(stdin io.Reader, stdout, stderr io.Writer) (runtime.Process, error)

// Session is one shell and the commands run in it.
type Session struct {
	ID      string
	Created time.Time
	marker  string
	proc    runtime.Process
	in      *io.PipeWriter
	queue   chan *Command
	writes  chan chunk // to the shell's input, in order, by one writer
	ended   chan struct{}
	out     *splitter
	errs    *splitter
	budget  *Budget

	mu      sync.Mutex
	cmds    []*Command // in order, the last MaxKept finished and every live one
	current *Command
	nextID  int
	closed  bool
	pending atomic.Int64 // input bytes queued and not yet written
}

// chunk is a write to the shell's input: a command line, a drain or a
// command's input.
type chunk struct {
	b     []byte
	input bool
}

// Command is one command line run in a session.
type Command struct {
	ID   string
	Line string

	s    *Session
	mu   sync.Mutex
	held int64 // bytes its tails hold, as counted in the budget
	// elem is its place among the budget's kept commands (under the
	// budget's lock); released, that its session forgot it.
	elem     *list.Element
	released bool
	stdout   *logcap.Tail
	stderr   *logcap.Tail
	output   *logcap.Tail // both, in the order the daemon read them
	exit     *int
	started  bool // the shell said it runs it (the start marker)
	done     chan struct{}
	changed  chan struct{} // closed and replaced at each write (followers)
	got      int           // markers seen: stdout's and stderr's
}

// New starts a session named id. Its commands' output counts against
// budget (nil: against none but the session's own bounds).
func New(id string, start Start, budget *Budget) (*Session, error) {
	s := &Session{ID: id, Created: time.Now(), marker: "__acp_" + strings.ToLower(rand.Text()) + "_",
		queue: make(chan *Command, MaxQueued), writes: make(chan chunk, maxWrites), ended: make(chan struct{}), budget: budget}
	pr, pw := io.Pipe()
	s.in = pw
	s.out = &splitter{s: s, stderr: false}
	s.errs = &splitter{s: s, stderr: true}
	p, err := start(pr, s.out, s.errs)
	if err != nil {
		return nil, err
	}
	s.proc = p
	go s.write()
	go s.run()
	go func() {
		x, _ := p.Wait(context.Background())
		s.end(x.Code)
	}()
	return s, nil
}

// write is the one writer of the shell's input: command lines, input
// and drains, in the order they were queued. A write the shell does not
// take waits here, never in a caller.
func (s *Session) write() {
	for {
		select {
		case c := <-s.writes:
			_, err := s.in.Write(c.b)
			if c.input {
				s.pending.Add(-int64(len(c.b)))
			}
			if err != nil {
				return
			}
		case <-s.ended:
			return
		}
	}
}

// run writes each queued command to the shell once the one before it
// has finished: a command that reads its input gets what Input sends,
// never the next command.
func (s *Session) run() {
	for {
		var c *Command
		select {
		case c = <-s.queue:
		case <-s.ended:
			return
		}
		s.mu.Lock()
		s.current = c
		s.mu.Unlock()
		q := "'" + strings.ReplaceAll(c.Line, "'", `'\''`) + "'"
		// command eval: a line the shell cannot parse is that command's
		// error, not the shell's end (eval is a special built-in). All of
		// it is one line of the shell's, which a shell reads whole before
		// it runs any of it, and it says so first (the start marker): the
		// command's input (Input) is sent only then, so that it reaches
		// the command, never a shell that reads ahead (dash reads what
		// its pipe holds; it took input sent sooner as a command of its
		// own, and the command waited for input forever). After the
		// command, the shell reads and drops its input up to the drain
		// line, which is sent once the command has ended: input the
		// command did not read is never run as a command of the shell's.
		line := fmt.Sprintf("printf '%s%s\\n'; command eval %s; printf '%s%%d\\n' \"$?\"; printf '%s\\n' >&2; "+
			"while IFS= read -r __acp_l; do [ \"$__acp_l\" = '%s%s' ] && break; done; unset __acp_l\n",
			s.marker, startMark, q, s.marker, s.marker, s.marker, drainMark)
		select {
		case s.writes <- chunk{b: []byte(line)}:
		case <-s.ended:
			return
		}
		select {
		case <-c.done:
		case <-s.ended:
			return
		}
		// Input sent before the end (Input checks under s.mu) is queued
		// before the drain.
		s.mu.Lock()
		select {
		case s.writes <- chunk{b: []byte("\n" + s.marker + drainMark + "\n")}:
		case <-s.ended:
		}
		s.mu.Unlock()
	}
}

// Run queues line; it runs once the commands before it have finished.
func (s *Session) Run(line string) (*Command, error) {
	if len(line) > MaxLine {
		return nil, fmt.Errorf("a command line of %d bytes; at most %d", len(line), MaxLine)
	}
	if strings.ContainsRune(line, 0) {
		return nil, errors.New("a command line cannot hold a NUL byte")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.nextID++
	c := &Command{ID: "cmd-" + strconv.Itoa(s.nextID), Line: line, s: s,
		stdout: logcap.NewTail(MaxOutput), stderr: logcap.NewTail(MaxOutput), output: logcap.NewTail(MaxOutput),
		done: make(chan struct{}), changed: make(chan struct{})}
	select {
	case s.queue <- c:
	default:
		return nil, ErrBusy
	}
	s.cmds = append(s.cmds, c)
	s.trimLocked()
	return c, nil
}

// trimLocked forgets the oldest finished commands past MaxKept.
func (s *Session) trimLocked() {
	for len(s.cmds) > MaxKept {
		i := 0
		for i < len(s.cmds) && !s.cmds[i].Finished() {
			i++
		}
		if i == len(s.cmds) {
			return
		}
		s.budget.release(s.cmds[i])
		s.cmds = append(s.cmds[:i], s.cmds[i+1:]...)
	}
}

// Commands lists the commands the session remembers, oldest first.
func (s *Session) Commands() []*Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Command(nil), s.cmds...)
}

// Command finds a command by id.
func (s *Session) Command(id string) (*Command, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cmds {
		if c.ID == id {
			return c, nil
		}
	}
	return nil, ErrNoSuch
}

// Input sends data to the input of the command that is running. It
// never waits for the command to read it: past MaxPendingInput bytes not
// yet taken, it is ErrInputFull. What the command does not read before it
// ends is dropped, never run by the shell.
func (s *Session) Input(id string, data string) error {
	c, err := s.Command(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A command that has started and not finished is the one running:
	// the next starts only once it has finished (checked under s.mu, so
	// that the input is queued before the drain that follows its end).
	switch {
	case s.closed:
		return ErrClosed
	case c.Finished():
		return ErrFinished
	case !started:
		return ErrNotStarted
	case s.pending.Load()+int64(len(data)) > MaxPendingInput || len(s.writes) >= maxWrites-2:
		return ErrInputFull
	}
	s.pending.Add(int64(len(data)))
	s.writes <- chunk{b: []byte(data), input: true} // room is kept: run adds at most two
	return nil
}

// Close ends the shell and every command in it.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.in.Close()
	s.proc.Kill()
	<-s.ended
}

// Ended is closed once the shell has ended.
func (s *Session) Ended() <-chan struct{} { return s.ended }

// end is the shell's end: the command running, and every one waiting,
// ends with it.
func (s *Session) end(code int) {
	s.mu.Lock()
	s.closed = true
	cmds := append([]*Command(nil), s.cmds...)
	s.mu.Unlock()
	s.in.CloseWithError(ErrClosed)
	for _, c := range cmds {
		c.finish(code)
	}
	// An ended session's commands are read only by answers being
	// written: their output counts no longer.
	for _, c := range cmds {
		s.budget.release(c)
	}
	close(s.ended)
}

// deliver is output of the running command.
func (s *Session) deliver(stderr bool, b []byte) {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c == nil || len(b) == 0 {
		return
	}
	c.write(stderr, b)
}

// began is the start marker: the shell has read the command's line and
// runs it.
func (s *Session) began() {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.started = true
		c.mu.Unlock()
	}
}

// marked is a marker seen on one stream (with the exit code on stdout's).
func (s *Session) marked(stderr bool, code int) {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.got++
	if !stderr {
		c.exit = &code
	}
	both := c.got == 2
	c.mu.Unlock()
	if both {
		c.finish(code)
	}
}

func (c *Command) write(stderr bool, b []byte) {
	c.mu.Lock()
	if stderr {
		c.stderr.Write(b)
	} else {
		c.stdout.Write(b)
	}
	c.output.Write(b)
	var delta int64
	if !c.released {
		held := int64(c.stdout.Len() + c.stderr.Len() + c.output.Len())
		delta = held - c.held
		c.held = held
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	c.s.budget.add(delta) // outside c.mu: the budget locks commands
}

// drop forgets the command's output and returns what it held.
func (c *Command) drop() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stdout.Drop()
	c.stderr.Drop()
	c.output.Drop()
	held := c.held
	c.held = 0
	return held
}

// finish ends the command with code unless it has ended; its output may
// then be dropped to keep the budget.
func (c *Command) finish(code int) {
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return
	default:
	}
	if c.exit == nil {
		c.exit = &code
	}
	close(c.done)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	c.s.budget.keep(c)
}

// Finished reports whether the command has ended.
func (c *Command) Finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Done is closed when the command has ended.
func (c *Command) Done() <-chan struct{} { return c.done }

// ExitCode is the command's exit code once it has ended; nil before.
func (c *Command) ExitCode() *int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.Finished() || c.exit == nil {
		return nil
	}
	code := *c.exit
	return &code
}

// Logs is what the command wrote: stdout, stderr, both in the order read,
// and whether any was cut (the tail is kept).
func (c *Command) Logs() (stdout, stderr, output string, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stdout.String(), c.stderr.String(), c.output.String(), c.stdout.Cut() || c.stderr.Cut() || c.output.Cut()
}

// Follow passes emit what the command has written and what it writes
// next, stream by stream, until it has ended (and all of it was passed)
// or ctx ends.
func (c *Command) Follow(ctx context.Context, emit func(stderr bool, text string) error) error {
	var sentOut, sentErr int64
	for {
		c.mu.Lock()
		outNew, outAt := c.stdout.Since(sentOut)
		errNew, errAt := c.stderr.Since(sentErr)
		changed := c.changed
		c.mu.Unlock()
		if outNew != "" {
			if err := emit(false, outNew); err != nil {
				return err
			}
		}
		if errNew != "" {
			if err := emit(true, errNew); err != nil {
				return err
			}
		}
		sentOut, sentErr = outAt, errAt
		if c.Finished() {
			if outNew == "" && errNew == "" {
				return nil
			}
			continue // what came last, then the end
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startMark follows the marker on stdout when the shell starts a
// command; an exit code follows it when the command ends. drainMark
// follows it on the shell's input where the input of an ended command
// ends.
const (
	startMark = "S"
	drainMark = "D"
)

// splitter routes one of the shell's streams: output of the command
// running, then its marker and the end of that line (the marker follows
// the output directly: a command's last line need not end).
type splitter struct {
	s       *Session
	stderr  bool
	pending []byte // bytes that may be the start of a marker
}

func (w *splitter) Write(b []byte) (int, error) {
	n := len(b)
	w.pending = append(w.pending, b...)
	m := w.s.marker // random: output cannot hold it, wherever it comes
	for {
		i := strings.Index(string(w.pending), m)
		if i < 0 {
			break
		}
		end := strings.IndexByte(string(w.pending[i+len(m):]), '\n')
		if end < 0 {
			// The marker's line has not all come: keep it.
			w.s.deliver(w.stderr, w.pending[:i])
			w.pending = append([]byte(nil), w.pending[i:]...)
			return n, nil
		}
		w.s.deliver(w.stderr, w.pending[:i])
		rest := string(w.pending[i+len(m) : i+len(m)+end])
		w.pending = append([]byte(nil), w.pending[i+len(m)+end+1:]...)
		switch {
		case w.stderr:
			w.s.marked(true, 0)
		case rest == startMark:
			w.s.began()
		default:
			code, _ := strconv.Atoi(rest)
			w.s.marked(false, code)
		}
	}
	// Deliver all but what could begin a marker.
	keep := 0
	for k := min(len(m)-1, len(w.pending)); k > 0; k-- {
		if strings.HasPrefix(m, string(w.pending[len(w.pending)-k:])) {
			keep = k
			break
		}
	}
	w.s.deliver(w.stderr, w.pending[:len(w.pending)-keep])
	w.pending = append([]byte(nil), w.pending[len(w.pending)-keep:]...)
	return n, nil
}
