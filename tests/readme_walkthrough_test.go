package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// step is one command of a README console block and the output the
// README shows for it.
type step struct {
	cmd  string
	want []string
}

// consoleSteps reads the ```console blocks of one README section: each
// "$ " line (and its "\" continuations) is a command, the lines up to the
// next one its output.
func consoleSteps(t *testing.T, readme, section string) []step {
	t.Helper()
	i := strings.Index(readme, "\n## "+section+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", section)
	}
	body := readme[i+len(section)+5:]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	var steps []step
	in, cont := false, false
	for line := range strings.SplitSeq(body, "\n") {
		switch {
		case line == "```console":
			in = true
		case line == "```":
			in = false
		case !in:
		case cont:
			steps[len(steps)-1].cmd += "\n" + line
			cont = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{cmd: line[2:]})
			cont = strings.HasSuffix(line, `\`)
		case strings.TrimSpace(line) != "" && len(steps) > 0:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	return steps
}

var (
	number = regexp.MustCompile(`[0-9]+`)
	gap    = regexp.MustCompile(`  +`)
)

// shownAs makes a line the README shows into a pattern for what a run
// prints: "…" stands for anything, a number for any number (pids, ports
// and times differ from run to run), a gap of spaces for any gap (a
// table's columns are as wide as their widest cell); the rest is literal.
func shownAs(line string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i, part := range strings.Split(strings.TrimRight(line, " "), "…") {
		if i > 0 {
			b.WriteString(".*")
		}
		for j, words := range gap.Split(part, -1) {
			if j > 0 {
				b.WriteString(" +")
			}
			for k, lit := range number.Split(words, -1) {
				if k > 0 {
					b.WriteString(`[0-9]+`)
				}
				b.WriteString(regexp.QuoteMeta(lit))
			}
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// The README's walk-through, run as a newcomer would: its commands in
// order, in one shell, against a fresh daemon whose files are where the
// README says (under $HOME), each printing what the README shows.
func TestREADMEWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl on PATH: the walk-through's commands are curl's")
	}
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README shows both runtimes available: without an engine this
	// machine cannot print that; with one, a daemon that says otherwise
	// fails.
	dockertest.Engine(t)
	steps := consoleSteps(t, string(b), "Walk-through")
	if len(steps) < 8 {
		t.Fatalf("the walk-through has %d commands", len(steps))
	}
	home := t.TempDir()
	state := filepath.Join(home, ".local", "state")
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{
		PortLo: lo, PortHi: hi, State: state, TokenFile: true,
		Root: filepath.Join(state, "agent-control-plane", "sandboxes"),
	})
	// The README's addresses are the defaults; this daemon's are its
	// test's block: the API on its first port, the first sandbox on the
	// next.
	api, sandbox := "localhost:"+strconv.Itoa(lo), "localhost:"+strconv.Itoa(lo+1)
	bin := testenv.Binary(t)
	const sep = "\x1e-- next step --"
	var script strings.Builder
	var run []step
	for _, s := range steps {
		if s.cmd == "make run" {
			continue // the daemon is this test's
		}
		cmd := strings.NewReplacer("localhost:4025", api, "localhost:4100", sandbox, "bin/agent-control-plane ", bin+" ").Replace(s.cmd)
		script.WriteString(cmd + "\necho '" + sep + "'\n")
		run = append(run, s)
	}
	sh := exec.Command("bash", "-c", script.String())
	// The CLI finds the daemon by the URL it is told (the README's is the
	// default) and its token as it would: in the file under $HOME.
	sh.Env = append(os.Environ(), "HOME="+home, "XDG_STATE_HOME=", "AGENT_CONTROL_PLANE_TOKEN=", "AGENT_CONTROL_PLANE_URL="+d.URL, "NO_COLOR=1")
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the walk-through's commands: %v\n%s", err, out)
	}
	got := strings.Split(strings.ReplaceAll(string(out), home, "/home/you"), sep+"\n")
	if len(got) != len(run)+1 {
		t.Fatalf("%d commands printed %d outputs:\n%s", len(run), len(got)-1, out)
	}
	for i, s := range run {
		var lines []string
		for l := range strings.SplitSeq(got[i], "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		}
		ok := len(lines) == len(s.want)
		for j := 0; ok && j < len(lines); j++ {
			ok = shownAs(s.want[j]).MatchString(strings.TrimRight(lines[j], " "))
		}
		if !ok {
			t.Errorf("$ %s\nthe README shows:\n%s\nit printed:\n%s", s.cmd, strings.Join(s.want, "\n"), strings.Join(lines, "\n"))
		}
	}
}
