// Package runtimetest is the conformance suite every runtime passes: the
// scenarios the supervisor relies on, run against a real runtime on this
// machine (native with cgroups on and off, docker, and every later one)
// and against the fake, in the manner of Nomad's driver test kit.
//
// A runtime's test calls Run with a Harness that knows how to make the
// runtime and what a spec of the stub agent looks like for it.
//
// This file is long because it is the whole conformance suite, kept in
// one place so that every runtime's test is judged by all of it.
package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Harness adapts the suite to one runtime.
type Harness struct {
	// New makes a runtime. Two runtimes made by one harness see the same
	// workloads, as a restarted daemon sees its predecessor's.
	New func(t *testing.T) runtime.Runtime
	// Workload completes spec with what runs the stub agent (a command,
	// an image) with knobs, the stub agent's STUB_AGENT_* variables.
	Workload func(spec *runtime.Spec, knobs map[string]string)
	// Tool is the argv prefix that runs fake.Tool inside a sandbox (the
	// test tool cmd/stub-exec; never the product binary).
	Tool []string
	// Forge, when set, returns a state that names something that is not
	// this workload (Adopt must say ErrNotOurs).
	Forge func(st runtime.HandleState) runtime.HandleState
}

// ForgeField is a Harness.Forge for a state whose data is a JSON object:
// the same state with field set to value.
func ForgeField(field string, value any) func(runtime.HandleState) runtime.HandleState {
	return func(st runtime.HandleState) runtime.HandleState {
		var s map[string]any
		_ = json.Unmarshal(st.Data, &s)
		s[field] = value
		st.Data, _ = json.Marshal(s)
		return st
	}
}

// Deadline bounds every wait: generous, the machine is shared and noisy.
const Deadline = 60 * time.Second

// Run runs every scenario the runtime's capabilities call for.
func Run(t *testing.T, h Harness) {
	caps := h.New(t).Capabilities()
	t.Run("Capabilities", func(t *testing.T) { capabilities(t, h) })
	t.Run("StartServes", func(t *testing.T) { startServes(t, h) })
	t.Run("SelfExit", func(t *testing.T) { selfExit(t, h) })
	t.Run("StopGrace", func(t *testing.T) { stopGrace(t, h) })
	t.Run("Adopt", func(t *testing.T) { adopt(t, h) })
	t.Run("Sweep", func(t *testing.T) { sweep(t, h) })
	if _, ok := h.New(t).(runtime.Pruner); ok {
		t.Run("Prune", func(t *testing.T) { prune(t, h) })
	}
	if caps.Limits {
		t.Run("Limits", func(t *testing.T) { limits(t, h) })
	}
	if caps.Exec {
		t.Run("Exec", func(t *testing.T) { execs(t, h) })
	}
	if caps.Terminal {
		t.Run("Terminal", func(t *testing.T) { terminal(t, h) })
	}
	if caps.Files {
		t.Run("Files", func(t *testing.T) { files(t, h) })
		t.Run("Resolve", func(t *testing.T) { resolve(t, h) })
	}
	if _, ok := h.New(t).(runtime.Checker); ok {
		t.Run("Checker", func(t *testing.T) { checker(t, h) })
	}
	// What a handle offers shows only on a started workload: each of
	// these starts one and skips when its handle offers nothing.
	t.Run("Usage", func(t *testing.T) { usage(t, h) })
	t.Run("Ports", func(t *testing.T) { ports(t, h) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	t.Cleanup(cancel)
	return ctx
}

// Spec is a spec for sandbox id in a fresh directory, with a port leased
// when the runtime asks for one.
func Spec(t *testing.T, rt runtime.Runtime, id string) runtime.Spec {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	marker := id + "." + hex.EncodeToString(b)
	spec := runtime.Spec{
		ID: id, Dir: dir, Workspace: ws, Stdout: filepath.Join(dir, "stdout.log"), Stderr: filepath.Join(dir, "stderr.log"),
		Marker: marker, Seal: "seal-" + marker, Vars: []string{"PATH=" + os.Getenv("PATH")},
	}
	if rt.Capabilities().LocalPort {
		spec.Port = freePort(t)
	}
	return spec
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// sandboxes numbers the suite's sandboxes.
var sandboxes atomic.Int64

// started is a running workload and its spec; its cleanup stops and
// deletes it.
type started struct {
	rt   runtime.Runtime
	spec runtime.Spec
	h    runtime.Handle
}

func start(t *testing.T, h Harness, rt runtime.Runtime, knobs map[string]string) started {
	t.Helper()
	spec := Spec(t, rt, fmt.Sprintf("rt%d", sandboxes.Add(1)))
	h.Workload(&spec, knobs)
	hd, err := rt.Start(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Deadline)
		defer cancel()
		_ = hd.Stop(ctx, 0)
		_ = hd.Delete(ctx)
	})
	return started{rt: rt, spec: spec, h: hd}
}

// waitDone waits for the workload's end, and for OnDone to run what was
// given it before the end (while the workload usually still runs) and
// after it, each once Done is closed.
func waitDone(t *testing.T, hd runtime.Handle) runtime.Exit {
	t.Helper()
	before, after := make(chan struct{}), make(chan struct{})
	hd.OnDone(func() {
		select {
		case <-hd.Done():
		default:
			t.Error("OnDone ran before Done was closed")
		}
		close(before)
	})
	deadline := time.After(Deadline)
	select {
	case <-hd.Done():
	case <-deadline:
		t.Fatal("the workload did not end")
	}
	hd.OnDone(func() { close(after) })
	for _, c := range []chan struct{}{before, after} {
		select {
		case <-c:
		case <-deadline:
			t.Fatal("OnDone did not run once the workload ended")
		}
	}
	return hd.Exit()
}

// awaitServing waits, with the daemon's own probe, until the endpoint
// answers 2xx.
func awaitServing(t *testing.T, ep runtime.Endpoint) {
	t.Helper()
	if ep.IsZero() {
		t.Fatal("the handle reports no endpoint")
	}
	if err := probe.NewHTTP(2*time.Second).Await(ctxT(t), ep.URL("/api/info"), probe.Readiness); err != nil {
		t.Fatalf("endpoint %s never answered: %v", ep.URL(""), err)
	}
}

func capabilities(t *testing.T, h Harness) {
	rt := h.New(t)
	caps := rt.Capabilities()
	_, limiter := rt.(runtime.Limiter)
	if caps.Limits && !limiter {
		t.Error("Capabilities.Limits, but the runtime is no Limiter")
	}
	s := start(t, h, rt, nil)
	_, execer := s.h.(runtime.Execer)
	_, filer := s.h.(runtime.Files)
	if caps.Exec && !execer || caps.Files && !filer {
		t.Errorf("Capabilities %+v, but the handle is an Execer: %v, Files: %v", caps, execer, filer)
	}
	if !caps.LocalPort && s.spec.Port != 0 {
		t.Error("a runtime without LocalPort got a port")
	}
	if caps.Exec && !caps.Terminal {
		x := s.h.(runtime.Execer)
		if p, err := x.Exec(ctxT(t), runtime.ExecSpec{Argv: append(h.Tool, "exit", "0"), TTY: true}); !errors.Is(err, runtime.ErrExecStart) {
			t.Errorf("no Capabilities.Terminal, but an exec with TTY answered %v, %v, want ErrExecStart", p, err)
		}
	}
}

// The workload answers at the endpoint its handle reports, and a polite
// stop ends it without a forced kill.
func startServes(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	awaitServing(t, s.h.Endpoint())
	if s.spec.Port != 0 && s.h.Endpoint().Port != s.spec.Port {
		t.Errorf("endpoint %+v, want the leased port %d", s.h.Endpoint(), s.spec.Port)
	}
	if err := s.h.Stop(ctxT(t), 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	e := waitDone(t, s.h)
	if e.Signal == unix.SIGKILL {
		t.Errorf("a workload that ends on SIGTERM was killed: %v", e)
	}
}

// A workload that exits by itself is seen, with its code and time.
func selfExit(t *testing.T, h Harness) {
	before := time.Now().Add(-time.Second)
	s := start(t, h, h.New(t), map[string]string{"STUB_AGENT_EXIT_AFTER_MS": "300"})
	e := waitDone(t, s.h)
	if e.Unknown || e.Code != 3 {
		t.Errorf("exit %+v, want code 3", e)
	}
	if e.At.Before(before) || e.At.After(time.Now().Add(time.Second)) {
		t.Errorf("exit time %v is not when it ended", e.At)
	}
}

// A workload that ignores SIGTERM is killed once grace has passed.
func stopGrace(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), map[string]string{"STUB_AGENT_IGNORE_SIGTERM": "1"})
	awaitServing(t, s.h.Endpoint())
	if err := s.h.Stop(ctxT(t), 300*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	e := waitDone(t, s.h)
	if e.Signal != unix.SIGKILL && e.Code != 137 {
		t.Errorf("exit %+v, want a SIGKILL", e)
	}
	if err := s.h.Delete(ctxT(t)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// A second runtime adopts the workload from its state; after Delete the
// state names nothing; a garbled or forged state is refused.
func adopt(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	awaitServing(t, s.h.Endpoint())
	st := s.h.State()
	// A command started before the restart ends with the adopted
	// sandbox's stop too.
	var before runtime.Process
	if x, ok := s.h.(runtime.Execer); ok {
		p, err := x.Exec(ctxT(t), runtime.ExecSpec{Argv: append(append([]string(nil), h.Tool...), "sleep", "120")})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		before = p
	}
	rt2 := h.New(t)
	a, err := rt2.Adopt(ctxT(t), st)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if a.Endpoint() != s.h.Endpoint() {
		t.Errorf("adopted endpoint %+v, want %+v", a.Endpoint(), s.h.Endpoint())
	}
	awaitServing(t, a.Endpoint())
	if _, err := rt2.Adopt(ctxT(t), runtime.HandleState{Version: 99, Data: []byte(`{}`)}); !errors.Is(err, runtime.ErrState) {
		t.Errorf("Adopt of an unknown version: %v, want ErrState", err)
	}
	if h.Forge != nil {
		if _, err := rt2.Adopt(ctxT(t), h.Forge(st)); !errors.Is(err, runtime.ErrNotOurs) && !errors.Is(err, runtime.ErrGone) {
			t.Errorf("Adopt of a forged state: %v, want ErrNotOurs", err)
		}
	}
	if err := a.Stop(ctxT(t), 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitDone(t, a)
	if before != nil {
		if _, err := before.Wait(ctxT(t)); err != nil {
			t.Errorf("a command started before the restart outlived the adopted sandbox's stop: %v", err)
		}
	}
	if err := a.Delete(ctxT(t)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := h.New(t).Adopt(ctxT(t), st); !errors.Is(err, runtime.ErrGone) {
		t.Errorf("Adopt after Delete: %v, want ErrGone", err)
	}
}

// Sweep ends a workload by its marker alone.
func sweep(t *testing.T, h Harness) {
	rt := h.New(t)
	s := start(t, h, rt, nil)
	awaitServing(t, s.h.Endpoint())
	own := runtime.Owned{Known: map[string]bool{s.spec.Marker: true}, Seal: func(string) string { return s.spec.Seal }}
	if err := h.New(t).Sweep(ctxT(t), []string{s.spec.Marker}, own); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	waitDone(t, s.h)
}

// Prune releases the remains of an ended workload whose Delete never ran.
func prune(t *testing.T, h Harness) {
	rt := h.New(t)
	s := start(t, h, rt, nil)
	if err := s.h.Stop(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s.h)
	own := runtime.Owned{Known: map[string]bool{s.spec.Marker: true}, Seal: func(string) string { return s.spec.Seal }}
	rt2 := h.New(t)
	if err := rt2.(runtime.Pruner).Prune(ctxT(t), nil, own); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if a, err := rt2.Adopt(ctxT(t), s.h.State()); err == nil {
		select {
		case <-a.Done():
			t.Error("Prune left the remains of an ended workload")
		default:
			t.Error("Prune left a workload running")
		}
	}
}

// Limits are enforced as given, read back, and changed.
func limits(t *testing.T, h Harness) {
	rt := h.New(t)
	want := runtime.Resources{MemoryBytes: 256 << 20, Pids: 64}
	if got, err := rt.(runtime.Limiter).Enforceable(want); err != nil {
		t.Skipf("this machine cannot enforce %+v: %v", want, err)
	} else if got != want {
		t.Skipf("this machine enforces only %+v of %+v", got, want)
	}
	spec := Spec(t, rt, "rtlimits")
	h.Workload(&spec, nil)
	spec.Resources = want
	hd, err := rt.Start(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Start with limits: %v", err)
	}
	t.Cleanup(func() { _ = hd.Stop(context.Background(), 0); _ = hd.Delete(context.Background()) })
	lr, ok := hd.(runtime.LimitReader)
	if !ok {
		t.Fatal("a runtime with limits has handles that cannot say which are in force")
	}
	if got, err := lr.Limits(ctxT(t)); err != nil || got != want {
		t.Errorf("Limits = %+v, %v; want %+v", got, err, want)
	}
	less := runtime.Resources{MemoryBytes: 128 << 20, Pids: 32}
	if err := hd.(runtime.Resizer).Resize(ctxT(t), less); err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if got, err := lr.Limits(ctxT(t)); err != nil || got != less {
		t.Errorf("Limits after Resize = %+v, %v; want %+v", got, err, less)
	}
}

// run execs argv (after the tool prefix) and returns its exit and outputs.
func run(t *testing.T, h Harness, x runtime.Execer, spec runtime.ExecSpec) (runtime.Exit, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	spec.Argv = append(append([]string(nil), h.Tool...), spec.Argv...)
	spec.Stdout, spec.Stderr = &out, &errb
	p, err := x.Exec(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Exec %q: %v", spec.Argv, err)
	}
	e, err := p.Wait(ctxT(t))
	if err != nil {
		t.Fatalf("Wait %q: %v", spec.Argv, err)
	}
	return e, out.String(), errb.String()
}

// execCase is one check of Exec, run against a sandbox the cases share
// (each runnable alone: -run 'Exec/Name').
type execCase struct {
	name  string
	check func(t *testing.T, h Harness, s started, x runtime.Execer)
}

var execCases = []execCase{
	{"ExitCode", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if e, _, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"exit", "7"}}); e.Code != 7 || e.Unknown {
			t.Errorf("exit 7: %+v", e)
		}
	}},
	{"Env", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if _, out, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"env", "EXEC_VAR"}, Env: []string{"EXEC_VAR=given"}}); out != "given\n" {
			t.Errorf("env of the exec: %q", out)
		}
	}},
	{"MarkerNotForged", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if _, out, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"env", runtime.MarkerEnv}, Env: []string{runtime.MarkerEnv + "=forged"}}); strings.Contains(out, "forged") {
			t.Errorf("an exec could set its marker: %q", out)
		}
	}},
	{"SandboxEnv", func(t *testing.T, h Harness, s started, x runtime.Execer) {
		if _, out, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"env", runtime.EnvSandboxID}}); out != s.spec.ID+"\n" {
			t.Errorf("the sandbox's own environment: %s = %q, want %q", runtime.EnvSandboxID, out, s.spec.ID)
		}
	}},
	{"Dir", func(t *testing.T, h Harness, s started, x runtime.Execer) {
		_, home, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"pwd"}})
		if err := os.MkdirAll(filepath.Join(s.spec.Workspace, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, out, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"pwd"}, Dir: "sub"}); out != strings.TrimSuffix(home, "\n")+"/sub\n" {
			t.Errorf("pwd in sub: %q, the workspace is %q", out, home)
		}
	}},
	{"Stdin", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if _, out, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"cat"}, Stdin: strings.NewReader("through stdin")}); out != "through stdin" {
			t.Errorf("cat: %q", out)
		}
	}},
	{"Stderr", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if _, out, errs := run(t, h, x, runtime.ExecSpec{Argv: []string{"err", "to stderr"}}); errs != "to stderr\n" || out != "" {
			t.Errorf("stderr %q, stdout %q", errs, out)
		}
	}},
	{"Merged", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		var out bytes.Buffer
		p, err := x.Exec(ctxT(t), runtime.ExecSpec{Argv: append(append([]string(nil), h.Tool...), "err", "merged"), Stdout: &out, Merged: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if out.String() != "merged\n" {
			t.Errorf("stderr merged into stdout: %q", out.String())
		}
	}},
	{"Timeout", func(t *testing.T, h Harness, _ started, x runtime.Execer) {
		if e, _, _ := run(t, h, x, runtime.ExecSpec{Argv: []string{"sleep", "120"}, Timeout: 300 * time.Millisecond}); e.Reason != runtime.ReasonTimeout {
			t.Errorf("a command past its timeout: %+v", e)
		}
	}},
	{"MissingProgram", func(t *testing.T, _ Harness, _ started, x runtime.Execer) {
		// Said before anything runs, the same on every runtime (the
		// engine's own answer would be exit 126 and its message).
		if p, err := x.Exec(ctxT(t), runtime.ExecSpec{Argv: []string{"no-such-program-here"}}); err == nil {
			e, _ := p.Wait(ctxT(t))
			t.Errorf("a missing program started and ended %+v, want ErrProgramNotFound", e)
		} else if !errors.Is(err, runtime.ErrExecStart) || !errors.Is(err, runtime.ErrProgramNotFound) {
			t.Errorf("a missing program: %v, want ErrExecStart and ErrProgramNotFound", err)
		}
	}},
}

func execs(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	awaitServing(t, s.h.Endpoint())
	x := s.h.(runtime.Execer)
	for _, c := range execCases {
		t.Run(c.name, func(t *testing.T) { c.check(t, h, s, x) })
	}
	// What runs when the sandbox stops ends with it (last: it stops the
	// sandbox the cases share).
	t.Run("EndsWithTheSandbox", func(t *testing.T) {
		p, err := x.Exec(ctxT(t), runtime.ExecSpec{Argv: append(append([]string(nil), h.Tool...), "sleep", "120")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.h.Stop(ctxT(t), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctxT(t)); err != nil {
			t.Errorf("an exec outlived its sandbox's stop: %v", err)
		}
	})
}

// terminal: a command with a terminal sees a terminal of the size asked,
// then of a new size, and reads what is typed.
func terminal(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	awaitServing(t, s.h.Endpoint())
	in, typed := io.Pipe()
	defer typed.Close()
	out := &lockedBuffer{}
	p, err := s.h.(runtime.Execer).Exec(ctxT(t), runtime.ExecSpec{Argv: append(append([]string(nil), h.Tool...), "term"), TTY: true, Cols: 100, Rows: 30, Stdin: in, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	term, ok := p.(runtime.Terminal)
	if !ok {
		t.Fatalf("an exec with TTY is a %T, not a runtime.Terminal", p)
	}
	type_ := func(line string) {
		if _, err := io.WriteString(typed, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	type_("tty")
	type_("size")
	out.await(t, "tty /dev/pts/", "size 30 100")
	if err := term.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	type_("size")
	out.await(t, "size 40 120")
	type_("exit 3")
	if e, err := p.Wait(ctxT(t)); err != nil || e.Code != 3 {
		t.Errorf("exit 3 typed: %+v, %v", e, err)
	}
}

// lockedBuffer is output written by one goroutine and read by another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// await waits until the output holds every one of want.
func (b *lockedBuffer) await(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := ""
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output: %q", missing, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// usage: a handle that meters its workload says what a running one
// uses.
func usage(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	m, ok := s.h.(runtime.Meter)
	if !ok {
		t.Skip("this runtime's handles do not meter their workloads (no runtime.Meter)")
	}
	awaitServing(t, s.h.Endpoint())
	var u runtime.Usage
	deadline := time.Now().Add(Deadline)
	for {
		var err error
		if u, err = m.Usage(ctxT(t)); errors.Is(err, runtime.ErrNotMetered) {
			t.Skipf("this handle cannot meter its workload: %v", err)
		} else if err != nil {
			t.Fatalf("Usage: %v", err)
		}
		if u.MemoryBytes > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if u.MemoryBytes <= 0 || u.CPUSeconds < 0 || u.Pids < 0 {
		t.Errorf("the usage of a running workload: %+v", u)
	}
}

// ports: a port of the host's that a process outside the workload
// listens on is not reached through PortEndpoint where the workload
// shares the host's loopback (ErrNotListening): a preview reaches what its
// sandbox serves and nothing else.
func ports(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	p, ok := s.h.(runtime.Ports)
	if !ok {
		t.Skip("this runtime's handles reach no port of their workloads (no runtime.Ports)")
	}
	awaitServing(t, s.h.Endpoint())
	port := foreignListener(t)
	ep, err := p.PortEndpoint(ctxT(t), port)
	if err == nil && ep.Host == "127.0.0.1" {
		t.Errorf("a loopback port another process listens on is reachable: %+v", ep)
	} else if err != nil && !errors.Is(err, runtime.ErrNotListening) {
		t.Errorf("PortEndpoint of a port nothing of the workload listens on: %v", err)
	}
	// A workload with a network of its own is dialled through its
	// handle: the same port there is its own, where nothing listens.
	if d, ok := s.h.(runtime.PortDialer); ok {
		if c, err := d.DialPort(ctxT(t), port); err == nil {
			c.Close()
			t.Errorf("DialPort reached port %d, which only a process outside the workload listens on", port)
		} else if !errors.Is(err, runtime.ErrNotListening) {
			t.Errorf("DialPort of a port nothing of the workload listens on: %v", err)
		}
	}
}

// foreignListener is a loopback port that a process of the test's own,
// outside any workload, listens on: a socket handed to a child, closed in
// the test.
func foreignListener(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	holder := exec.Command("sleep", "600")
	holder.ExtraFiles = []*os.File{f}
	err = holder.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	return port
}

// checker: a runtime that can say whether it is available says so of
// one the suite can start workloads with.
func checker(t *testing.T, h Harness) {
	if err := h.New(t).(runtime.Checker).Check(ctxT(t)); err != nil {
		t.Errorf("Check of a runtime that starts workloads: %v", err)
	}
}

// resolve: Resolve follows links beneath the workspace (relative, and
// absolute as the workload names it; a dangling one to its target), and
// refuses one that leads out of it.
func resolve(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	f := s.h.(runtime.Files)
	ctx := ctxT(t)
	if _, err := f.Write(ctx, "g.txt", strings.NewReader("g"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := s.spec.Workspace
	os.Symlink("g.txt", filepath.Join(ws, "to-g"))
	os.Symlink(path.Join(f.WorkDir(), "g.txt"), filepath.Join(ws, "abs-to-g"))
	os.Symlink("not-yet", filepath.Join(ws, "dangling"))
	os.Symlink("/etc", filepath.Join(ws, "to-etc"))
	os.Symlink("../..", filepath.Join(ws, "up"))
	for name, want := range map[string]string{"to-g": "g.txt", "abs-to-g": "g.txt", "dangling": "not-yet"} {
		if got, err := f.Resolve(ctx, name); err != nil || got != path.Join(f.WorkDir(), want) {
			t.Errorf("Resolve %s: %q, %v", name, got, err)
		}
	}
	for _, name := range []string{"to-etc/passwd", "up/x"} {
		if got, err := f.Resolve(ctx, name); !errors.Is(err, runtime.ErrOutside) {
			t.Errorf("Resolve %s, out of the workspace: %q, %v", name, got, err)
		}
	}
}

func files(t *testing.T, h Harness) {
	s := start(t, h, h.New(t), nil)
	f := s.h.(runtime.Files)
	ctx := ctxT(t)
	if err := f.Mkdir(ctx, "a/b", 0o755); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	if n, err := f.Write(ctx, "a/b/f.txt", strings.NewReader("content"), 0o640); err != nil || n != 7 {
		t.Fatalf("Write: %d, %v", n, err)
	}
	rc, fi, err := f.Open(ctx, "a/b/f.txt")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "content" || fi.Size != 7 || fi.Mode.Perm() != 0o640 {
		t.Errorf("read %q, %+v", b, fi)
	}
	if list, err := f.List(ctx, "a/b"); err != nil || len(list) != 1 || list[0].Name != "f.txt" {
		t.Errorf("List: %+v, %v", list, err)
	}
	if err := f.Rename(ctx, "a/b/f.txt", "a/g.txt"); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if err := f.Chmod(ctx, "a/g.txt", 0o600); err != nil {
		t.Fatalf("Chmod: %v", err)
	}
	if fi, err := f.Stat(ctx, "a/g.txt"); err != nil || fi.Mode.Perm() != 0o600 {
		t.Errorf("Stat after Chmod: %+v, %v", fi, err)
	}
	if err := f.Remove(ctx, "a", false); err == nil {
		t.Error("Remove of a directory that is not empty, not recursive, succeeded")
	}
	if err := f.Remove(ctx, "a", true); err != nil {
		t.Fatalf("Remove recursive: %v", err)
	}
	if _, err := f.Stat(ctx, "a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat after Remove: %v, want not exist", err)
	}
	// Nothing outside is reached: not through "..", an absolute path or
	// a link.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.spec.Workspace, "out")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../stdout.log", "a/../../x", "/etc/passwd", "out/secret", "out"} {
		if name == "out" {
			if fi, err := f.Stat(ctx, name); err != nil || fi.Mode&fs.ModeSymlink == 0 {
				t.Errorf("Stat of a link: %+v, %v; want the link described", fi, err)
			}
			if _, _, err := f.Open(ctx, name); !errors.Is(err, runtime.ErrOutside) {
				t.Errorf("Open of a link out: %v, want ErrOutside", err)
			}
			continue
		}
		if _, _, err := f.Open(ctx, name); !errors.Is(err, runtime.ErrOutside) {
			t.Errorf("Open %s: %v, want ErrOutside", name, err)
		}
		if _, err := f.Write(ctx, name, strings.NewReader("y"), 0o600); !errors.Is(err, runtime.ErrOutside) {
			t.Errorf("Write %s: %v, want ErrOutside", name, err)
		}
	}
	if err := f.Remove(ctx, "out", true); err != nil {
		t.Fatalf("Remove of a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("removing a link removed what it points to: %v", err)
	}
}
