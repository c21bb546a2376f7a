// Package interp keeps code interpreters inside sandboxes: a python3
// worker per context (worker.py) whose namespace lives from one run to
// the next, its output streamed as it comes — Daytona's code interpreter.
package interp

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

//go:embed worker.py
var worker string

// Argv runs the worker with the sandbox's python3.
var Argv = []string{"python3", "-u", "-c", worker}

// Language is the one language contexts speak.
const Language = "python"

// Bounds of one run.
const (
	// MaxCode bounds the code of one run.
	MaxCode = 1 << 20
	// maxMessage bounds one message of the worker's (it reads its
	// outputs 16 KiB at a time: escaped as JSON, at most six times that).
	maxMessage = 128 << 10
)

// Errors of a run.
var (
	// ErrTimeout: the run passed its timeout; the worker was ended and
	// the context starts afresh (its state is lost).
	ErrTimeout = errors.New("the code ran past its timeout")
	// ErrEnded: the worker ended (the sandbox stopped, the context was
	// deleted, or the code ended the interpreter).
	ErrEnded = errors.New("the interpreter has ended")
)

// Message is one piece of a run's output, as Daytona's WebSocket sends
// it: stdout or stderr text, or the error the code raised.
type Message struct {
	Type      string `json:"type"` // "stdout", "stderr", "error"
	Text      string `json:"text,omitempty"`
	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

// Start runs the worker in the sandbox with the context's directory.
type Start func(stdin io.Reader, stdout io.Writer) (runtime.Process, error)

// Context is one interpreter: a worker started at its first run and again
// after one that ended.
type Context struct {
	ID, Cwd string
	Created time.Time
	start   Start

	run    sync.Mutex // one run at a time
	mu     sync.Mutex
	p      runtime.Process
	in     *io.PipeWriter
	out    *bufio.Reader
	closed bool
}

// New is a context whose worker Start runs.
func New(id, cwd string, start Start) *Context {
	return &Context{ID: id, Cwd: cwd, Created: time.Now(), start: start}
}

// Active reports whether the context can run code (it was not deleted).
func (c *Context) Active() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed
}

// worker is the running worker, started if there is none.
func (c *Context) worker() (*io.PipeWriter, *bufio.Reader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, ErrEnded
	}
	if c.p != nil {
		return c.in, c.out, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := c.start(inR, outW)
	if err != nil {
		return nil, nil, err
	}
	go func() { // its end ends its pipes: a run waiting on them returns
		_, _ = p.Wait(context.Background())
		outW.CloseWithError(ErrEnded)
		inR.CloseWithError(ErrEnded)
	}()
	c.p, c.in, c.out = p, inW, bufio.NewReaderSize(outR, maxMessage)
	return c.in, c.out, nil
}

// drop ends the worker, waiting a moment at most for its end; the next
// run starts another.
func (c *Context) drop() {
	c.mu.Lock()
	p := c.p
	if p != nil {
		_ = p.Kill()
		c.in.Close()
		c.p, c.in, c.out = nil, nil, nil
	}
	c.mu.Unlock()
	if p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = p.Wait(ctx)
	}
}

// Run runs code with envs set for it, passing emit each message as it
// comes, until the code is done, timeout passes (ErrTimeout; zero: no
// bound), ctx ends or emit fails. A run cut short ends the worker.
func (c *Context) Run(ctx context.Context, code string, envs map[string]string, timeout time.Duration, emit func(Message) error) error {
	if len(code) > MaxCode {
		return fmt.Errorf("the code is %d bytes (at most %d)", len(code), MaxCode)
	}
	c.run.Lock()
	defer c.run.Unlock()
	in, out, err := c.worker()
	if err != nil {
		return err
	}
	req, _ := json.Marshal(struct {
		Code string            `json:"code"`
		Envs map[string]string `json:"envs,omitempty"`
	}{code, maps.Clone(envs)})
	done := make(chan error, 1)
	go func() {
		if _, err := in.Write(append(req, '\n')); err != nil {
			done <- ErrEnded
			return
		}
		done <- read(out, emit)
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err = <-done:
	case <-expired:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.drop()
		<-done // the worker's end ends the read
	}
	return err
}

// read passes on the worker's messages up to its "done".
func read(out *bufio.Reader, emit func(Message) error) error {
	for {
		line, err := out.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("the interpreter sent a message past %d bytes", maxMessage)
		}
		if err != nil {
			return ErrEnded
		}
		var m Message
		if json.Unmarshal(line, &m) != nil {
			return errors.New("the interpreter sent something that is not its protocol")
		}
		if m.Type == "done" {
			return nil
		}
		if err := emit(m); err != nil {
			return err
		}
	}
}

// Close ends the context and its worker.
func (c *Context) Close() {
	c.drop()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}
