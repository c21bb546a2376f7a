package tests

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// ticks reads the entrypoint logs with query q and returns the lines and
// the tick number of each ("stub-agent: tick N").
func ticks(t *testing.T, d *testenv.Daemon, id, q string) ([]wire.LogLine, []int) {
	t.Helper()
	code, b := call(t, d, "GET", "/v1/sandboxes/"+id+"/entrypoint-logs?"+q, "")
	if code != 200 {
		t.Fatalf("logs ?%s: %d %s", q, code, b)
	}
	var l wire.LogsResponse
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	var lines []wire.LogLine
	var ns []int
	for _, line := range l.Lines {
		var n int
		if _, err := fmt.Sscanf(line.Text, "stub-agent: tick %d\n", &n); err == nil {
			lines, ns = append(lines, line), append(ns, n)
		}
	}
	return lines, ns
}

// logsInWriteOrder checks sandbox id, whose stub prints a tick every 40
// ms to stdout and stderr in turn: the merged lines come back in the
// order they were written, dated in that order, picked by tail, since and
// stream, and followed in that order too. (The order is what the daemon
// sees, within its event latency: writes much closer together than that
// on a loaded machine can come back swapped, so the ticks are not.)
//
// It is long because it writes, rotates and reads one log, checking the
// order at each step.
func logsInWriteOrder(t *testing.T, d *testenv.Daemon, id string) {
	testenv.Eventually(t, "40 ticks written", func() bool {
		_, ns := ticks(t, d, id, "")
		return len(ns) >= 40
	})
	lines, ns := ticks(t, d, id, "")
	for i := range ns {
		stream := []string{"stdout", "stderr"}[ns[i]%2]
		if ns[i] != ns[0]+i || lines[i].Stream != stream {
			t.Fatalf("line %d is tick %d on %s, want tick %d on %s (all: %v)", i, ns[i], lines[i].Stream, ns[0]+i, stream, ns)
		}
		at, err := time.Parse(time.RFC3339Nano, lines[i].Time)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			if prev, _ := time.Parse(time.RFC3339Nano, lines[i-1].Time); at.Before(prev) {
				t.Fatalf("tick %d dated %s, before tick %d at %s", ns[i], lines[i].Time, ns[i-1], lines[i-1].Time)
			}
		}
		if since := time.Since(at); since < 0 || since > 5*time.Minute {
			t.Fatalf("tick %d dated %s, not when it was written", ns[i], lines[i].Time)
		}
	}

	// tail: the last 6 lines of both streams, in order.
	_, last := ticks(t, d, id, "tail=6")
	if len(last) != 6 || last[5]-last[0] != 5 {
		t.Fatalf("tail=6 gave ticks %v", last)
	}
	// stream: stdout's lines alone are the even ticks.
	_, even := ticks(t, d, id, "stream=stdout")
	for _, n := range even {
		if n%2 != 0 {
			t.Fatalf("stream=stdout gave tick %d", n)
		}
	}
	// since: from a line's time on, that line and the later ones.
	mid := lines[len(lines)/2]
	after, ns2 := ticks(t, d, id, "since="+url.QueryEscape(mid.Time))
	if len(after) == 0 || ns2[0] > ns[len(ns)/2] || ns2[0] < ns[len(ns)/2]-1 {
		t.Fatalf("since %s (tick %d) gave ticks from %v", mid.Time, ns[len(ns)/2], ns2)
	}
	// timestamps: each line of output after its time.
	code, b := call(t, d, "GET", "/v1/sandboxes/"+id+"/entrypoint-logs?tail=3&timestamps=true", "")
	var l wire.LogsResponse
	json.Unmarshal(b, &l)
	out := strings.Split(strings.TrimSuffix(l.Output, "\n"), "\n")
	if code != 200 || len(out) != 3 || len(l.Lines) != 3 {
		t.Fatalf("tail=3&timestamps=true: %d %q", code, l.Output)
	}
	for i, line := range out {
		if want := l.Lines[i].Time + " " + strings.TrimSuffix(l.Lines[i].Text, "\n"); line != want {
			t.Fatalf("stamped line %q, want %q", line, want)
		}
	}
	if code, b := call(t, d, "GET", "/v1/sandboxes/"+id+"/entrypoint-logs?since=yesterday", ""); code != 400 || !strings.Contains(string(b), "duration") {
		t.Fatalf("since=yesterday: %d %s", code, b)
	}

	// Followed: both streams, in order, each chunk dated.
	cl := client.New(d.URL, client.WithToken(d.Token))
	var got []int
	done := fmt.Errorf("enough")
	_, err := cl.FollowLogs(testenv.Context(t), id, client.LogsOptions{Lines: 4}, func(stream string, c wire.LogChunk) error {
		var n int
		if _, err := fmt.Sscanf(c.Text, "stub-agent: tick %d\n", &n); err != nil {
			return nil
		}
		if _, err := time.Parse(time.RFC3339Nano, c.Time); err != nil || stream != []string{"stdout", "stderr"}[n%2] {
			return fmt.Errorf("tick %d on %s at %q", n, stream, c.Time)
		}
		if got = append(got, n); len(got) == 30 {
			return done
		}
		return nil
	})
	if err != done {
		t.Fatalf("follow: %v (ticks %v)", err, got)
	}
	for i := range got {
		if got[i] != got[0]+i {
			t.Fatalf("followed ticks out of order: %v", got)
		}
	}
}

func TestLogsInWriteOrder(t *testing.T) {
	d := startDaemon(t)
	create(t, d, `{"name":"tick","envVars":{"STUB_AGENT_TICK_MS":"40"}}`)
	waitState(t, d, "tick", "started")
	logsInWriteOrder(t, d, "tick")
}

func TestDockerLogsInWriteOrder(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	t.Cleanup(func() { call(t, d, "DELETE", "/v1/sandboxes/dtick", "") })
	create(t, d, `{"name":"dtick","runtime":"docker","snapshot":"`+stubImage+`","envVars":{"STUB_AGENT_TICK_MS":"40"}}`)
	waitState(t, d, "dtick", "started")
	logsInWriteOrder(t, d, "dtick")
}

// The CLI's logs: -n, -t, --stdout/--stderr, --since, each stream's lines
// to the same stream here.
func TestCLILogsFlags(t *testing.T) {
	d := startDaemon(t)
	create(t, d, `{"name":"clitick","envVars":{"STUB_AGENT_TICK_MS":"20"}}`)
	waitState(t, d, "clitick", "started")
	testenv.Eventually(t, "ticks written", func() bool {
		_, ns := ticks(t, d, "clitick", "")
		return len(ns) >= 14 // the last 6 lines of stdout are ticks
	})
	// -n 4 -t: four lines in all, across both streams, each stamped.
	code, out, errOut := cli(t, d, "logs", "clitick", "-n", "4", "-t")
	all := strings.Split(strings.TrimSpace(out+errOut), "\n")
	if code != 0 || len(all) != 4 || out == "" || errOut == "" {
		t.Fatalf("logs -n 4 -t: %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	for _, line := range all {
		at, rest, _ := strings.Cut(line, " ")
		if _, err := time.Parse(time.RFC3339Nano, at); err != nil || !strings.HasPrefix(rest, "stub-agent: tick ") {
			t.Fatalf("stamped line %q", line)
		}
	}
	// Bundled, as docker users type them: -tn1 is -t -n 1.
	code, out, errOut = cli(t, d, "logs", "clitick", "-tn1")
	if at, _, _ := strings.Cut(strings.TrimSpace(out+errOut), " "); code != 0 || strings.Count(out+errOut, "\n") != 1 || !strings.HasPrefix(at, "20") {
		t.Fatalf("logs -tn1: %d %q %q", code, out, errOut)
	}
	// --stdout: only the even ticks, nothing on stderr.
	code, out, errOut = cli(t, d, "logs", "clitick", "--stdout", "--tail", "6")
	if code != 0 || errOut != "" || strings.Count(out, "tick") != 6 {
		t.Fatalf("logs --stdout: %d %q %q", code, out, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "stub-agent: tick %d", &n); err != nil || n%2 != 0 {
			t.Fatalf("logs --stdout printed %q", line)
		}
	}
	// --since: a duration, and a word that is neither.
	if code, out, _ := cli(t, d, "logs", "clitick", "--since", "1h", "--stderr"); code != 0 || !strings.Contains(out+"", "") {
		t.Fatalf("logs --since 1h: %d", code)
	}
	if code, _, errOut := cli(t, d, "logs", "clitick", "--since", "lunchtime"); code == 0 || !strings.Contains(errOut, "neither a duration") {
		t.Fatalf("logs --since lunchtime: %d %q", code, errOut)
	}
	if code, _, errOut := cli(t, d, "logs", "clitick", "--stdout", "--stderr"); code != 2 || !strings.Contains(errOut, "give neither") {
		t.Fatalf("logs --stdout --stderr: %d %q", code, errOut)
	}
	// -n 0 is no line, as docker's; a negative count is refused.
	if code, out, errOut := cli(t, d, "logs", "clitick", "-n", "0"); code != 0 || out != "" || errOut != "" {
		t.Fatalf("logs -n 0: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, d, "logs", "clitick", "-n", "-1"); code != 2 || !strings.Contains(errOut, "0 or more") {
		t.Fatalf("logs -n -1: %d %q", code, errOut)
	}
}

// After 300,000 lines, logs prints every one kept (as docker's does),
// and -n past what one answer holds says on stderr what it cut and how
// to get it all: nothing stops short in silence.
func TestCLILogsNotCutInSilence(t *testing.T) {
	const perStream = 150000
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: []string{"AGENT_CONTROL_PLANE_LOG_MAX_BYTES=" + strconv.Itoa(64<<20)}})
	spam := perStream * len("stub-agent: spam line 000000000 ..............................................\n")
	create(t, d, fmt.Sprintf(`{"name":"chatty","envVars":{"STUB_AGENT_SPAM_BYTES":"%d"}}`, spam))
	waitState(t, d, "chatty", "started")
	testenv.Eventually(t, "both streams spammed", func() bool {
		_, out, _ := cli(t, d, "logs", "chatty", "--stdout", "-n", "3")
		_, _, errOut := cli(t, d, "logs", "chatty", "--stderr", "-n", "3")
		return strings.Contains(out, "last spam line") && strings.Contains(errOut, "last spam line")
	})
	count := func(s string) (lines, spam int) {
		return strings.Count(s, "\n"), strings.Count(s, "spam line ")
	}
	for _, args := range [][]string{{}, {"--since", "10m"}} {
		code, out, errOut := cli(t, d, append([]string{"logs", "chatty"}, args...)...)
		if _, n := count(out); code != 0 || n != perStream || !strings.Contains(out, "spam line 000000000 ") {
			t.Errorf("logs %q: exit %d, %d spam lines on stdout, want %d", args, code, n, perStream)
		}
		if _, n := count(errOut); n != perStream {
			t.Errorf("logs %q: %d spam lines on stderr, want %d", args, n, perStream)
		}
	}
	code, out, errOut := cli(t, d, "logs", "chatty", "-n", "100000")
	note := errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
	if lines, _ := count(out + errOut); code != 0 || lines >= 100000 || !strings.Contains(note, "without -n, logs prints all of them") {
		t.Errorf("logs -n 100000: exit %d, %d lines, last line of stderr %q", code, lines, note)
	}
	if code, out, errOut := cli(t, d, "logs", "chatty", "-n", "10"); code != 0 || strings.Count(out+errOut, "\n") != 10 {
		t.Errorf("logs -n 10: exit %d, %q %q", code, out, errOut)
	}
	// get says how much is kept.
	if _, out, _ := cli(t, d, "get", "chatty"); !regexp.MustCompile(`(?m)^Logs: +stdout 11\.\d MiB, stderr 11\.\d MiB$`).MatchString(out) {
		t.Errorf("get: %q", out)
	}
	// --until: nothing was written before the sandbox was.
	if code, out, errOut := cli(t, d, "logs", "chatty", "--until", "2026-01-01"); code != 0 || out != "" || errOut != "" {
		t.Errorf("logs --until 2026-01-01: exit %d, %q %q", code, out, errOut)
	}
	// -f --until: following ends then, the sandbox still running.
	until := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	if code, out, _ := cli(t, d, "logs", "-f", "--until", until, "--stdout", "chatty"); code != 0 || strings.Count(out, "spam line ") != perStream {
		t.Errorf("logs -f --until: exit %d, %d spam lines", code, strings.Count(out, "spam line "))
	}
}

// get says each log's size and its rotation: what the rotated file
// holds and what rotation dropped.
func TestCLIGetSaysLogSizes(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: []string{"AGENT_CONTROL_PLANE_LOG_MAX_BYTES=" + strconv.Itoa(64<<10)}})
	create(t, d, `{"name":"rot","envVars":{"STUB_AGENT_SPAM_BYTES":"1000000"}}`)
	waitState(t, d, "rot", "started")
	want := regexp.MustCompile(`(?m)^Logs: +stdout \d+ KiB \(\d+ KiB of it in stdout\.log\.1, \d+ KiB older rotated away\), stderr `)
	testenv.Eventually(t, "get shows the rotation", func() bool {
		_, out, _ := cli(t, d, "get", "rot")
		return want.MatchString(out)
	})
	var sb struct{ Logs []wire.LogSize }
	_, b := call(t, d, "GET", "/v1/sandboxes/rot", "")
	if json.Unmarshal(b, &sb) != nil || len(sb.Logs) != 2 || sb.Logs[0].WrittenBytes < 1000000 || sb.Logs[0].RotatedBytes == 0 {
		t.Errorf("logs: %+v", sb.Logs)
	}
}
