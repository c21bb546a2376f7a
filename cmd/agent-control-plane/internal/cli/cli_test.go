package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

func TestParseInterleavedFlags(t *testing.T) {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	labels := kvFlag{}
	fs.Var(labels, "label", "")
	wait := fs.Bool("wait", false, "")
	pos, err := parseInterleaved(fs, []string{"--label", "a=1", "demo", "--wait", "--label", "b=2=3", "--", "--not-a-flag"}, 0)
	if err != nil || len(pos) != 2 || pos[0] != "demo" || pos[1] != "--not-a-flag" || !*wait || labels["a"] != "1" || labels["b"] != "2=3" {
		t.Fatalf("pos %q err %v wait %v labels %v", pos, err, *wait, labels)
	}
	for _, args := range [][]string{{"--label", "nokv"}, {"--nope"}} {
		if _, err := parseInterleaved(fs, args, 0); err == nil {
			t.Errorf("parseInterleaved(%q) accepted", args)
		}
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
			if code != exitOK || !strings.HasPrefix(out, "Usage: agent-control-plane "+cmd.name) || errOut != "" {
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
		if code != exitOK || !strings.Contains(out, "Commands:") {
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
	// Client flags belong to client commands only.
	if code, _, errOut := runCLI("--json", "stub-agent"); code != exitUsage {
		t.Errorf("--json stub-agent: exit %d, stderr %q", code, errOut)
	}
}

// Global flags are accepted before the command and after it, and those
// given before survive the command's own flag set.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	var got *cli
	cmd := command{name: "probe", client: true, exec: func(_ context.Context, c *cli, _ []string) error { got = c; return nil }}
	for _, args := range [][]string{
		{"--url", "http://127.0.0.1:1", "--json", "--token", "t"},
		{"--url=http://127.0.0.1:1", "--json"},
	} {
		c := newCLI(io.Discard, io.Discard)
		global := flag.NewFlagSet("g", flag.ContinueOnError)
		c.bindGlobal(global)
		if err := global.Parse(args); err != nil {
			t.Fatal(err)
		}
		fs := cmd.flagSet(c)
		if _, err := parseInterleaved(fs, nil, 0); err != nil {
			t.Fatal(err)
		}
		cmd.exec(context.Background(), c, nil)
		if got.url != "http://127.0.0.1:1" || !got.json {
			t.Errorf("%q: url %q json %v after the command's flags", args, got.url, got.json)
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
