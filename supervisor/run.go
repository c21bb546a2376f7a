package supervisor

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of Run: a command's words, how long it may run, and the tail of
// each of its outputs kept for the answer.
const (
	MaxRunArgs    = 4096
	MaxRunTimeout = 24 * time.Hour
	MaxRunOutput  = 1 << 20
)

// RunSpec is a command to run in a sandbox to its end, its output kept.
type RunSpec struct {
	Argv []string
	// Env is added to the workload's environment; it is checked as a
	// create's is (ValidateEnv), never echoed.
	Env map[string]string
	// Dir is the working directory as the workload sees it; empty: its
	// workspace.
	Dir   string
	Stdin io.Reader
	// Timeout kills the command this long after it started; 0 is
	// MaxRunTimeout.
	Timeout time.Duration
	// Merged keeps one output, both streams in the order written, in
	// RunResult.Stdout.
	Merged bool
}

// RunResult is how a command ended and what it wrote.
type RunResult struct {
	Exit runtime.Exit
	// Stdout and Stderr are the tails (MaxRunOutput each) of what it
	// wrote, redacted as the sandbox's logs are; with Merged, Stdout
	// holds both.
	Stdout, Stderr string
	// Cut: an output passed MaxRunOutput; its tail is kept.
	Cut bool
}

// check refuses a spec outside Run's bounds with a *field.Error.
func (r *RunSpec) check() error {
	switch {
	case len(r.Argv) == 0 || len(r.Argv) > MaxRunArgs || r.Argv[0] == "":
		return field.Errorf(field.Argv, "must hold 1 to %d words, the first the program", MaxRunArgs)
	case r.Timeout < 0 || r.Timeout > MaxRunTimeout:
		return field.Errorf(field.Timeout, "must be 0 (the longest) to %s", MaxRunTimeout)
	}
	return ValidateEnv(r.Env)
}

// Run runs a command in a running sandbox to its end and returns its exit
// and its output, redacted: the toolbox's one-shot command, for every
// face. It is Exec with its bounds (ErrBusy past them), so it counts as
// activity. A command that cannot start is an error wrapping
// runtime.ErrExecStart; when ctx ends first the command is killed and
// ctx's error returned.
func (s *Supervisor) Run(ctx context.Context, id string, spec RunSpec) (RunResult, error) {
	if err := spec.check(); err != nil {
		return RunResult{}, err
	}
	stdout, stderr := logcap.NewTail(MaxRunOutput), logcap.NewTail(MaxRunOutput)
	p, err := s.Exec(ctx, id, spec.exec(stdout, stderr))
	if err != nil {
		return RunResult{}, err
	}
	exit, err := p.Wait(ctx)
	if err != nil {
		return RunResult{}, err // ctx ended: the command was killed with it
	}
	red := s.Redactor(id)
	return RunResult{Exit: exit, Stdout: red.Redact(stdout.String()), Stderr: red.Redact(stderr.String()), Cut: stdout.Cut() || stderr.Cut()}, nil
}

// RunStream is Run with the output passed to emit as the command writes
// it (each piece redacted on its own, stderr apart, one piece at a time)
// instead of kept; started is called once the command runs, before any
// emit. It returns how the command ended. An emit that fails (the client
// left) ends the reading of the output; cancel ctx to kill the command.
func (s *Supervisor) RunStream(ctx context.Context, id string, spec RunSpec, started func(), emit func(stderr bool, text string) error) (runtime.Exit, error) {
	if err := spec.check(); err != nil {
		return runtime.Exit{}, err
	}
	red := s.Redactor(id)
	mu := &sync.Mutex{}
	mu.Lock() // no output passes before started has been called
	out := func(stderr bool) io.Writer {
		return writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if err := emit(stderr, red.Redact(string(p))); err != nil {
				return 0, err
			}
			return len(p), nil
		})
	}
	p, err := s.Exec(ctx, id, spec.exec(out(false), out(true)))
	if err != nil {
		mu.Unlock()
		return runtime.Exit{}, err
	}
	started()
	mu.Unlock()
	return p.Wait(ctx)
}

// exec is the command spec runs, its outputs to stdout and stderr (with
// Merged, both to stdout), its timeout MaxRunTimeout where it gives none.
func (spec RunSpec) exec(stdout, stderr io.Writer) runtime.ExecSpec {
	x := runtime.ExecSpec{Argv: spec.Argv, Env: childenv.List(spec.Env), Dir: spec.Dir, Stdin: spec.Stdin, Stdout: stdout, Stderr: stderr, Merged: spec.Merged, Timeout: spec.Timeout}
	if x.Timeout == 0 {
		x.Timeout = MaxRunTimeout
	}
	if spec.Merged {
		x.Stderr = nil
	}
	return x
}

// ShellArgv runs the sandbox's shell ($SHELL, else sh): on a script read
// from its input (Daytona's execute), or on a terminal.
var ShellArgv = []string{"sh", "-c", `exec "${SHELL:-sh}"`}

// writerFunc is a function as an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
