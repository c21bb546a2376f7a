package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

func TestParseInterleavedFlags(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	fs := c.newFlags("create", "create NAME")
	labels := kvFlag{}
	fs.Var(labels, "label", "")
	wait := fs.Bool("wait", false, "")
	pos, ok := parse(fs, []string{"--label", "a=1", "demo", "--wait", "--label", "b=2=3"}, 1, 1)
	if !ok || len(pos) != 1 || pos[0] != "demo" || !*wait || labels["a"] != "1" || labels["b"] != "2=3" {
		t.Fatalf("pos %v ok %v wait %v labels %v", pos, ok, *wait, labels)
	}
	for _, tc := range []struct {
		args     []string
		min, max int
	}{
		{[]string{}, 1, 1},                  // missing NAME
		{[]string{"a", "b"}, 1, 1},          // one too many
		{[]string{"--label", "nokv"}, 0, 0}, // not k=v
		{[]string{"--nope"}, 0, 0},          // unknown flag
	} {
		fs := c.newFlags("x", "x")
		fs.Var(kvFlag{}, "label", "")
		if _, ok := parse(fs, tc.args, tc.min, tc.max); ok {
			t.Errorf("parse(%q) accepted", tc.args)
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

func TestUsageListsEveryCommand(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	for _, c := range commands() {
		if !strings.Contains(out.String(), "  "+c.name+" ") {
			t.Errorf("usage does not list %s", c.name)
		}
	}
	if code := run([]string{"frobnicate"}, &out, &out); code != exitUsage {
		t.Errorf("unknown command: exit %d", code)
	}
}

// Coloured states keep the columns aligned.
func TestTableAlignsWithColour(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out, color: true}
	now := time.Now()
	c.table([]wire.SandboxInfo{
		{ID: "a", State: wire.StateStarted, Port: 4100, CreatedAt: wire.Time{Time: now}},
		{ID: "longer-name", State: wire.StateStopped, Port: 4101, CreatedAt: wire.Time{Time: now}},
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
