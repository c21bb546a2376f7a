package supervisor

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// The toolbox's one activity rule, for every face: what changes a running
// sandbox through the toolbox (a command, a session's creation, line,
// input or deletion, a change of its files) counts; what only reads
// (listing, reading a file, a command's output) does not; a change that
// fails does not.
//
// It is long because its table is every operation of the toolbox, on one
// sandbox, each on what the one before made.
func TestToolboxActivityRule(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	h := realHarness(t, func(o *Options) { o.Now = clock.Now })
	h.create("a", nil, nil)
	h.waitState("a", Started)
	ctx := t.Context()
	files := func() runtime.Files {
		f, err := h.sup.Files("a")
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var sessionLine string
	lastActivity := func() time.Time {
		sb, err := h.sup.Get("a")
		if err != nil {
			t.Fatal(err)
		}
		return sb.LastActivityAt
	}
	for _, c := range []struct {
		name   string
		counts bool
		op     func() error
	}{
		{"run", true, func() error {
			_, err := h.sup.Run(ctx, "a", RunSpec{Argv: []string{"true"}})
			return err
		}},
		{"write", true, func() error { _, err := files().Write(ctx, "f", strings.NewReader("x"), 0o644); return err }},
		{"mkdir", true, func() error { return files().Mkdir(ctx, "d/e", 0o755) }},
		{"chmod", true, func() error { return files().Chmod(ctx, "f", 0o600) }},
		{"rename", true, func() error { return files().Rename(ctx, "f", "g") }},
		{"remove", true, func() error { return files().Remove(ctx, "d", true) }},
		{"list", false, func() error { _, err := files().List(ctx, "."); return err }},
		{"stat", false, func() error { _, err := files().Stat(ctx, "g"); return err }},
		{"read", false, func() error {
			rc, _, err := files().Open(ctx, "g")
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			return err
		}},
		{"a write that fails", false, func() error {
			if _, err := files().Write(ctx, "../../outside", strings.NewReader("x"), 0o644); err == nil {
				t.Error("a write outside the workspace succeeded")
			}
			return nil
		}},
		{"session create", true, func() error { _, err := h.sup.CreateSession("a", "s"); return err }},
		{"session line", true, func() error {
			c, err := h.sup.SessionRun("a", "s", "read v; echo got $v")
			if err == nil {
				sessionLine = c.ID
			}
			return err
		}},
		{"session input", true, func() error {
			var err error
			testenv.Eventually(t, "the line takes input", func() bool {
				err = h.sup.SessionInput("a", "s", sessionLine, "x\n")
				return !errors.Is(err, shell.ErrNotStarted)
			})
			return err
		}},
		{"session output", false, func() error {
			sess, err := h.sup.Session("a", "s")
			if err != nil {
				return err
			}
			c, err := sess.Command(sessionLine)
			if err != nil {
				return err
			}
			<-c.Done()
			if out := h.sup.CommandOutput("a", c); out.Stdout != "got x\n" {
				t.Errorf("the session's line wrote %q", out.Stdout)
			}
			return nil
		}},
		{"session list", false, func() error { _, err := h.sup.Sessions("a"); return err }},
		{"session delete", true, func() error { return h.sup.DeleteSession("a", "s") }},
	} {
		clock.Advance(time.Minute)
		before := lastActivity()
		if err := c.op(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if counted := lastActivity().After(before); counted != c.counts {
			t.Errorf("%s counted as activity: %v, want %v", c.name, counted, c.counts)
		}
	}
}

// Run's bounds, output and redaction hold for every face: what is out of
// bounds is a field error naming the core's field, the output is kept as
// its tail and redacted, merged when asked, and the exit is the
// command's.
func TestRunRules(t *testing.T) {
	h := newHarness(t, nil)
	const secret = "s3cr3t-value-0123456789"
	if _, err := h.sup.Create(t.Context(), CreateRequest{Name: "r", Env: map[string]string{"API_TOKEN": secret}}); err != nil {
		t.Fatal(err)
	}
	h.waitState("r", Started)
	tool := func(args ...string) []string { return append([]string{"stub-exec"}, args...) }
	for _, c := range []struct {
		name  string
		spec  RunSpec
		field string
	}{
		{"no words", RunSpec{}, field.Argv},
		{"an empty program", RunSpec{Argv: []string{""}}, field.Argv},
		{"too many words", RunSpec{Argv: make([]string, MaxRunArgs+1)}, field.Argv},
		{"a negative timeout", RunSpec{Argv: tool("exit", "0"), Timeout: -1}, field.Timeout},
		{"too long a timeout", RunSpec{Argv: tool("exit", "0"), Timeout: MaxRunTimeout + 1}, field.Timeout},
		{"a reserved variable", RunSpec{Argv: tool("exit", "0"), Env: map[string]string{"PORT": "1"}}, field.Env},
	} {
		if _, err := h.sup.Run(t.Context(), "r", c.spec); !isField(err, c.field) {
			t.Errorf("%s: %v, want a field error for %s", c.name, err, c.field)
		}
	}
	for _, c := range []struct {
		name                 string
		spec                 RunSpec
		code                 int
		reason               string
		stdout, stderr, tail string
		cut                  bool
	}{
		{"exit code", RunSpec{Argv: tool("exit", "3")}, 3, "", "", "", "", false},
		{"a secret is redacted", RunSpec{Argv: tool("env", "API_TOKEN")}, 0, "", "", "", "[REDACTED]\n", false},
		{"a variable given", RunSpec{Argv: tool("env", "GREETING"), Env: map[string]string{"GREETING": "hi"}}, 0, "", "hi\n", "", "", false},
		{"streams apart", RunSpec{Argv: tool("err", "oops")}, 0, "", "", "oops\n", "", false},
		{"streams merged", RunSpec{Argv: tool("err", "oops"), Merged: true}, 0, "", "oops\n", "", "", false},
		{"the tail is kept", RunSpec{Argv: tool("cat"), Stdin: strings.NewReader(strings.Repeat("y", MaxRunOutput) + "last\n")}, 0, "", "", "", "last\n", true},
		{"timeout", RunSpec{Argv: tool("sleep", "60"), Timeout: 50 * time.Millisecond}, -1, runtime.ReasonTimeout, "", "", "", false},
	} {
		res, err := h.sup.Run(t.Context(), "r", c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		switch {
		case c.reason != "" && res.Exit.Reason != c.reason,
			c.reason == "" && res.Exit.Code != c.code,
			c.stdout != "" && res.Stdout != c.stdout,
			c.stderr != "" && res.Stderr != c.stderr,
			c.tail != "" && !strings.HasSuffix(res.Stdout, c.tail),
			res.Cut != c.cut,
			strings.Contains(res.Stdout+res.Stderr, secret),
			c.cut && len(res.Stdout) > MaxRunOutput:
			t.Errorf("%s: %+v (stdout %d bytes)", c.name, res.Exit, len(res.Stdout))
			t.Logf("stdout %.200q, stderr %.200q, cut %v", res.Stdout, res.Stderr, res.Cut)
		}
	}
	if _, err := h.sup.Run(t.Context(), "r", RunSpec{Argv: []string{"no-such-program"}}); !isErr(err, runtime.ErrExecStart) {
		t.Errorf("a program that cannot start: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := h.sup.Run(ctx, "r", RunSpec{Argv: tool("sleep", "60")}); err == nil {
		t.Error("a run whose caller left answered")
	}
}
