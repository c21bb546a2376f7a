package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestInert(t *testing.T) {
	cases := []struct{ in, want, wantLog string }{
		{"plain text, ünïcödé", "plain text, ünïcödé", "plain text, ünïcödé"},
		{"\x1b]0;title\x07\x1b[2J", `\e]0;title\x07\e[2J`, `\e]0;title\x07\e[2J`},
		{"a\nb\tc\rd", `a\nb\tc\rd`, "a\nb\tc\\rd"},
		{"\u009b31m\x7f\x00", `\u009b31m\x7f\x00`, `\u009b31m\x7f\x00`},
		{"bad \xff utf8", `bad \xff utf8`, `bad \xff utf8`},
		{"evil\u202egpj.exe", `evil\u202egpj.exe`, `evil\u202egpj.exe`},
		{"\u2066a\u2069\u200f\u061c", `\u2066a\u2069\u200f\u061c`, `\u2066a\u2069\u200f\u061c`},
	}
	for _, c := range cases {
		if got := inert(c.in); got != c.want {
			t.Errorf("inert(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := inertLog(c.in); got != c.wantLog {
			t.Errorf("inertLog(%q) = %q, want %q", c.in, got, c.wantLog)
		}
	}
}

// Limits read as people write them, not as float noise.
func TestMemoryString(t *testing.T) {
	for gib, want := range map[float64]string{0.2: "204.8 MiB", 0.19999694824: "204.8 MiB", 0.25: "256 MiB", 1.5: "1.5 GiB", 2: "2 GiB", 1.0 / 64: "16 MiB"} {
		if got := memoryString(gib); got != want {
			t.Errorf("memoryString(%v) = %q, want %q", gib, got, want)
		}
	}
}

// A mistyped command gets the nearest one, as git does; a far one none.
func TestUnknownCommandSuggests(t *testing.T) {
	for in, want := range map[string]string{
		"lss":        `unknown command "lss"; did you mean ls?`,
		"stpo":       `unknown command "stpo"; did you mean stop?`,
		"dashbaord":  `unknown command "dashbaord"; did you mean dashboard?`,
		"frobnicate": `unknown command "frobnicate"`,
	} {
		if got := unknownCommand(newCLI(io.Discard, io.Discard).root(), in); got != want {
			t.Errorf("unknownCommand(%q) = %q, want %q", in, got, want)
		}
	}
}

// A mistyped flag gets the nearest of the command's.
func TestUnknownFlagSuggests(t *testing.T) {
	code, _, errOut := runCLI("logs", "--folow", "demo")
	if code != exitUsage || !strings.Contains(errOut, "unknown flag: --folow; did you mean --follow?") {
		t.Errorf("logs --folow: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI("logs", "--frobnicate", "demo"); code != exitUsage || strings.Contains(errOut, "did you mean") {
		t.Errorf("logs --frobnicate: exit %d, stderr %q", code, errOut)
	}
}

func TestPlural(t *testing.T) {
	if plural(1, "task") != "1 task" || plural(0, "task") != "0 tasks" || plural(64, "task") != "64 tasks" || plural(2, "sandbox") != "2 sandboxes" || plural(2, "directory") != "2 directories" || plural(2, "key") != "2 keys" {
		t.Error("plural")
	}
}

// Every help text shows flags as typed: --name (-x for one letter).
func TestHelpShowsTwoDashes(t *testing.T) {
	for _, cmd := range commands() {
		var out, errb bytes.Buffer
		Run([]string{cmd.name, "-h"}, &out, &errb)
		text := out.String() + errb.String()
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && len(strings.TrimSuffix(strings.Fields(line)[0], ",")) > 2 {
				t.Errorf("%s -h shows %q with one dash", cmd.name, line)
			}
		}
	}
}
