package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Exec runs spec in the container through the engine's exec API: in its
// namespaces and cgroup, with its environment, so a stop of the container
// ends it too.
func (h *handle) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("%w: empty command", runtime.ErrExecStart)
	}
	dir := spec.Dir
	if dir == "" {
		dir = WorkspaceDir
	} else if !path.IsAbs(dir) {
		dir = path.Join(WorkspaceDir, dir)
	}
	var env []string
	for _, kv := range spec.Env {
		if !strings.HasPrefix(kv, runtime.MarkerEnv+"=") {
			env = append(env, kv)
		}
	}
	if err := h.lookPath(ctx, spec.Argv[0], dir, env); err != nil {
		return nil, err
	}
	opts := container.ExecOptions{
		Cmd: spec.Argv, Env: env, WorkingDir: dir, Tty: spec.TTY,
		AttachStdin: spec.Stdin != nil, AttachStdout: true, AttachStderr: true,
	}
	if spec.TTY {
		cols, rows := runtime.TerminalSize(spec.Cols, spec.Rows)
		opts.ConsoleSize = &[2]uint{uint(rows), uint(cols)}
	}
	created, err := h.r.Client.ContainerExecCreate(ctx, h.st.ID, opts)
	if err != nil {
		return nil, h.r.engineErr("create exec", err)
	}
	// The size goes with the start too: engines apply the create's only
	// from API 1.42's start on.
	att, err := h.r.Client.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: spec.TTY, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return nil, h.r.engineErr("start exec", err)
	}
	x := &execProc{h: h, id: created.ID, Ending: runtime.NewEnding()}
	// The engine starts the command once attached; one that could not
	// start (no such program in the image, a missing directory) has
	// ended with code 126 or 127 and printed why.
	go x.run(ctx, spec, att.Reader, att.CloseWrite, att.Close, att.Conn)
	if spec.TTY {
		t := terminal{x}
		// Engines before API 1.42 size an exec's terminal only once it
		// runs (as docker's CLI does, a few tries while it starts).
		for try := 1; try <= 5 && t.Resize(spec.Cols, spec.Rows) != nil; try++ {
			time.Sleep(time.Duration(try) * 10 * time.Millisecond)
		}
		return t, nil
	}
	return x, nil
}

// terminal is a command started with a terminal by the engine.
type terminal struct{ *execProc }

func (t terminal) Resize(cols, rows int) error {
	cols, rows = runtime.TerminalSize(cols, rows)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := t.h.r.Client.ContainerExecResize(ctx, t.id, container.ResizeOptions{Width: uint(cols), Height: uint(rows)})
	if err != nil {
		return t.h.r.engineErr("resize exec", err)
	}
	return nil
}

// defaultPath is the PATH of a container whose image sets none, as the
// engine gives it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath finds program in the container as its exec would (through
// the PATH the exec's variables give, else the container's), so that a
// program the image lacks is ErrProgramNotFound before anything runs, as
// on the native runtime, not the engine's exit 126 and its message in
// the command's output. What the engine cannot say leaves the exec to
// try.
func (h *handle) lookPath(ctx context.Context, program, dir string, env []string) error {
	var candidates []string
	if strings.Contains(program, "/") {
		if !path.IsAbs(program) {
			program = path.Join(dir, program)
		}
		candidates = []string{program}
	} else {
		search := h.containerPath(ctx)
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				search = v
			}
		}
		for _, d := range strings.Split(search, ":") {
			if path.IsAbs(d) {
				candidates = append(candidates, path.Join(d, program))
			}
		}
	}
	key := strings.Join(candidates, ":")
	h.mu.Lock()
	known := h.found[key]
	h.mu.Unlock()
	if known {
		return nil
	}
	for _, c := range candidates {
		st, err := h.r.Client.ContainerStatPath(ctx, h.st.ID, c)
		switch {
		case err == nil && !st.Mode.IsDir():
			h.mu.Lock()
			if h.found == nil {
				h.found = map[string]bool{}
			}
			if len(h.found) < maxFound {
				h.found[key] = true
			}
			h.mu.Unlock()
			return nil
		case err != nil && !cerrdefs.IsNotFound(err):
			return nil // the engine cannot say: the exec will
		}
	}
	return fmt.Errorf("%w: %w: %q is not in the container (looked for %s)", runtime.ErrExecStart, runtime.ErrProgramNotFound, program, strings.Join(candidates, ", "))
}

// maxFound bounds the programs a handle remembers finding.
const maxFound = 64

// containerPath is the container's PATH (asked once), or defaultPath.
func (h *handle) containerPath(ctx context.Context) string {
	h.mu.Lock()
	p := h.path
	h.mu.Unlock()
	if p != "" {
		return p
	}
	info, err := h.r.Client.ContainerInspect(ctx, h.st.ID)
	if err != nil || info.Config == nil {
		return defaultPath // not kept: asked again next time
	}
	p = defaultPath
	for _, kv := range info.Config.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	h.mu.Lock()
	h.path = p
	h.mu.Unlock()
	return p
}

// execProc is one command started through the engine.
type execProc struct {
	h  *handle
	id string
	*runtime.Ending
}

// run copies the command's input and output until it ends, killing it
// when ctx ends or its time is up.
func (x *execProc) run(ctx context.Context, spec runtime.ExecSpec, out io.Reader, closeWrite func() error, closeConn func(), in io.Writer) {
	reason := ""
	defer func() { x.End(x.inspect(reason)) }()
	defer closeConn()
	if spec.Stdin != nil {
		go func() {
			_, _ = io.Copy(in, spec.Stdin)
			_ = closeWrite()
		}()
	}
	stdout, stderr := orDiscard(spec.Stdout), orDiscard(spec.Stderr)
	if spec.Merged { // the engine sends the two apart: merged as they come
		stderr = stdout
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if spec.TTY {
			_, _ = io.Copy(stdout, out)
		} else {
			_, _ = stdcopy.StdCopy(stdout, stderr, out)
		}
	}()
	var expired <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-copied:
	case <-ctx.Done():
		reason = "cancelled"
		_ = x.Kill()
	case <-expired:
		reason = runtime.ReasonTimeout
		_ = x.Kill()
	}
	if reason != "" {
		// The stream ends when the killed command does; an engine that
		// keeps it open is not waited on for long.
		select {
		case <-copied:
		case <-time.After(5 * time.Second):
			closeConn()
			<-copied
		}
	}
}

// inspect asks the engine how the command ended; it may report it still
// running a moment after its output closed.
func (x *execProc) inspect(reason string) runtime.Exit {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		info, err := x.h.r.Client.ContainerExecInspect(ctx, x.id)
		if err == nil && !info.Running {
			e := exitFromCode(info.ExitCode)
			e.Reason, e.At = reason, time.Now()
			return e
		}
		select {
		case <-ctx.Done():
			return runtime.Exit{Unknown: true, Reason: reason, At: time.Now()}
		case <-time.After(time.Duration(min(attempt+1, 20)) * 5 * time.Millisecond):
		}
	}
}

// exitFromCode reads an exit code as the engine reports it: a process
// killed by signal N as 128+N.
func exitFromCode(c int) runtime.Exit {
	e := runtime.Exit{Code: c}
	if c > 128 && c < 128+65 {
		e.Signal = unix.Signal(c - 128)
	}
	return e
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Kill ends the command: the engine has no call for it, so the process
// the engine names is signalled, once pinned with a pidfd and proven to
// be in this container's cgroup.
func (x *execProc) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := x.h.r.Client.ContainerExecInspect(ctx, x.id)
	if err != nil {
		return x.h.r.engineErr("inspect exec", err)
	}
	if !info.Running || info.Pid <= 0 {
		return nil
	}
	return killInContainer(info.Pid, info.ContainerID)
}

// killInContainer sends SIGKILL to pid if it is a process of container
// id (its cgroup path names the container), checked after pinning it.
func killInContainer(pid int, id string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil // gone since
	}
	if id == "" || !strings.Contains(string(b), id) {
		return fmt.Errorf("process %d is not in container %.12s; not signalled", pid, id)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}
