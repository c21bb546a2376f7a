package cli

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/spf13/pflag"
)

// probe runs args through the dispatcher with cmd added to the table's
// tree, and returns what its exec saw.
func probe(t *testing.T, cmd command, args ...string) (c *cli, got []string, code int) {
	t.Helper()
	c = newCLI(io.Discard, io.Discard)
	inner := cmd.exec
	cmd.exec = func(ctx context.Context, c *cli, args []string) error {
		got = args
		if inner != nil {
			return inner(ctx, c, args)
		}
		return nil
	}
	root := c.root()
	root.AddCommand(c.cobra(cmd))
	root.SetArgs(args)
	return c, got, c.report(root.Execute())
}

// Flags as docker's and kubectl's (POSIX, pflag): before, between or
// after the positionals, single letters bundled (-ft, -tn1), "--" ends
// them; exec's end at the sandbox's name.
func TestFlagsPOSIX(t *testing.T) {
	labels := kvFlag{}
	var wait, follow, stamps bool
	var n string
	cmd := command{name: "probe", maxArgs: -1, flags: func(fs *pflag.FlagSet) {
		fs.Var(labels, "label", "")
		fs.BoolVar(&wait, "wait", false, "")
		fs.BoolVarP(&follow, "follow", "f", false, "")
		fs.BoolVarP(&stamps, "timestamps", "t", false, "")
		fs.StringVarP(&n, "tail", "n", "", "")
	}}
	_, pos, code := probe(t, cmd, "probe", "--label", "a=1", "demo", "--wait", "--label", "b=2=3", "--", "--not-a-flag")
	if code != 0 || len(pos) != 2 || pos[0] != "demo" || pos[1] != "--not-a-flag" || !wait || labels["a"] != "1" || labels["b"] != "2=3" {
		t.Fatalf("pos %q code %d wait %v labels %v", pos, code, wait, labels)
	}
	if _, pos, code := probe(t, cmd, "probe", "-ft", "demo", "-tn1"); code != 0 || !follow || !stamps || n != "1" || len(pos) != 1 {
		t.Errorf("-ft demo -tn1: code %d pos %q follow %v stamps %v n %q", code, pos, follow, stamps, n)
	}
	for _, args := range [][]string{{"probe", "--label", "nokv"}, {"probe", "--nope"}, {"probe", "-x"}} {
		if _, _, code := probe(t, cmd, args...); code != exitUsage {
			t.Errorf("%q: exit %d", args, code)
		}
	}
	cmd.commandAfterName = true
	wait = false
	if _, pos, code := probe(t, cmd, "probe", "--wait", "demo", "ls", "-la", "--wait"); code != 0 || !wait || strings.Join(pos, " ") != "demo ls -la --wait" {
		t.Errorf("exec-style: code %d pos %q wait %v", code, pos, wait)
	}
}

// runCLI runs one command line in process and returns its exit code,
// stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The conventions every command shares, checked on every command of the
// table: -h and --help print its usage to stdout and exit 0, as does
// "help CMD"; a usage error is one line and a hint on stderr, exit 2.
func TestCommandConventions(t *testing.T) {
	for _, cmd := range commands() {
		for _, args := range [][]string{{cmd.name, "-h"}, {cmd.name, "--help"}, {"help", cmd.name}} {
			code, out, errOut := runCLI(args...)
			if code != exitOK || !strings.Contains(out, "Usage:\n  agent-control-plane "+cmd.name) || errOut != "" ||
				!cmd.hidden && !strings.Contains(out, "Examples:\n  ") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
		code, out, errOut := runCLI(cmd.name, "--no-such-flag")
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || out != "" || len(lines) != 2 || !strings.Contains(lines[0], "-no-such-flag") ||
			lines[1] != "Run 'agent-control-plane "+cmd.name+" -h' for usage." {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q", cmd.name, code, out, errOut)
		}
	}
}

func TestArgumentCounts(t *testing.T) {
	for _, args := range [][]string{{"get"}, {"get", "a", "b"}, {"autostop", "a"}, {"ls", "extra"}, {"rm"}, {"serve", "stray"}} {
		code, _, errOut := runCLI(args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, "usage: agent-control-plane "+args[0]) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
	// Minutes follow one rule everywhere: ≥ 0, fractions allowed.
	for _, bad := range []string{"x", "NaN", "1e10"} {
		code, _, errOut := runCLI("autostop", "a", bad)
		if code != exitUsage || !strings.Contains(errOut, "MINUTES") {
			t.Errorf("autostop a %s: exit %d, stderr %q", bad, code, errOut)
		}
	}
}

func TestTopLevel(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if code, out, _ := runCLI(args...); code != exitOK || out != Version+"\n" {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, _ := runCLI(args...)
		if code != exitOK || !strings.Contains(out, "Available Commands:") {
			t.Errorf("%q: exit %d", args, code)
		}
		for _, c := range commands() {
			if listed := strings.Contains(out, "  "+c.name+" "); listed == c.hidden {
				t.Errorf("%q lists %s: %v (hidden: %v)", args, c.name, listed, c.hidden)
			}
		}
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"help", "frobnicate"}, {"--bogus", "ls"}} {
		code, out, errOut := runCLI(args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, "agent-control-plane help") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	// Client flags belong to client commands only; --json to those with
	// something to print as JSON.
	for _, args := range [][]string{{"--json", "stub-agent"}, {"--json", "shell", "x"}, {"shell", "--json", "x"}} {
		if code, _, errOut := runCLI(args...); code != exitUsage || !strings.Contains(errOut, "json") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// Global flags are accepted before the command and after it.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	cmd := command{name: "probe", client: true}
	for _, args := range [][]string{
		{"--url", "http://127.0.0.1:1", "--json", "probe", "--token", "t"},
		{"--url=http://127.0.0.1:1", "probe", "--json"},
	} {
		c, _, code := probe(t, cmd, args...)
		if code != 0 || c.url != "http://127.0.0.1:1" || !c.json {
			t.Errorf("%q: code %d url %q json %v", args, code, c.url, c.json)
		}
	}
	// Through run: a daemon that is not there is reported the same way
	// with the flags before or after the command.
	a, _, errA := runCLI("--url", "http://127.0.0.1:1", "info")
	b, _, errB := runCLI("info", "--url", "http://127.0.0.1:1")
	if a != exitNoDaemon || a != b || errA != errB {
		t.Errorf("before: %d %q; after: %d %q", a, errA, b, errB)
	}
}

// watch keeps its columns with colour on: the state's codes take no width.
func TestWatchAlignsWithColour(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out, color: true}
	now := wire.Time{Time: time.Now()}
	for _, typ := range []string{wire.EventCreated, wire.EventStarted, wire.EventStopped, wire.EventDeleted} {
		c.watchLine(wire.StreamEvent{Type: typ, Time: now, Sandbox: &wire.SandboxInfo{ID: "sb", State: wire.StateStarted, Port: 4100}})
	}
	c.watchLine(wire.StreamEvent{Type: wire.EventReplaced, Time: now, Sandboxes: []wire.SandboxInfo{
		{ID: "sb", State: wire.StateDestroyed, Port: 4100}, {ID: "sb", State: wire.StateStarted, Port: 4100}}})
	if !strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("nothing coloured:\n%q", out.String())
	}
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out.String(), "")
	col := -1
	for _, l := range strings.Split(strings.TrimSpace(plain), "\n") {
		if strings.HasSuffix(l, "sandboxes") {
			continue
		}
		i := strings.Index(l+" ", " sb ") // a line ends at the name when it shows no port
		if col < 0 {
			col = i
		}
		if i != col {
			t.Fatalf("name column moves:\n%s", plain)
		}
	}
}

func TestKeepAliveEvery(t *testing.T) {
	for _, tc := range []struct {
		minutes float64
		want    time.Duration
	}{
		{0, time.Second},      // auto-stop off: still refresh, at the floor
		{0.01, time.Second},   // 0.6 s / 3 → floor of 1 s
		{1, 20 * time.Second}, // a third of the interval
		{15, time.Minute},     // capped at a minute
		{1000, time.Minute},
	} {
		if got := keepAliveEvery(tc.minutes); got != tc.want {
			t.Errorf("keepAliveEvery(%v) = %v, want %v", tc.minutes, got, tc.want)
		}
	}
}

func TestAgo(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 5 * time.Second: "5s", 90 * time.Second: "1m", 3 * time.Hour: "3h", 72 * time.Hour: "3d",
	} {
		if got := ago(d); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
}

// Coloured states keep the columns aligned.
func TestTableAlignsWithColour(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out, color: true}
	now := time.Now()
	c.table([]wire.SandboxInfo{
		{ID: "a", State: wire.StateStarted, Port: 4100, CreatedAt: wire.Time{Time: now}},
		{ID: "longer-name", State: wire.StateStarting, Port: 4101, CreatedAt: wire.Time{Time: now}},
	})
	if !strings.Contains(out.String(), "\x1b[32mstarted\x1b[0m") {
		t.Fatalf("state not coloured:\n%q", out.String())
	}
	plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out.String(), "")
	lines := strings.Split(strings.TrimSpace(plain), "\n")
	col := strings.Index(lines[0], "PORT")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "410") {
			t.Fatalf("PORT column misaligned:\n%s", plain)
		}
	}
}

func TestAutoStopInPastDue(t *testing.T) {
	now := time.Now()
	due := wire.Time{Time: now.Add(-2 * time.Second)}
	sb := wire.SandboxInfo{State: wire.StateStarted, AutoStopInterval: 0.05, AutoStopAt: &due}
	if got := autoStopIn(sb, now); got != "at the next check" {
		t.Errorf("past due: %q", got)
	}
	soon := wire.Time{Time: now.Add(90 * time.Second)}
	sb.AutoStopAt = &soon
	if got := autoStopIn(sb, now); got == "at the next check" || !strings.HasPrefix(got, "in ") {
		t.Errorf("in 90 s: %q", got)
	}
}
