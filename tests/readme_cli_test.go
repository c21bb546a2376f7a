package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeSection is the text of a "## title" section of README.md.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README has no section %q", title)
	}
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// The README's command-line table says what help says: the same
// commands, and for each the flags of its own (the global --url, --token
// and --json are said once above the table).
func TestREADMECommandsMatchHelp(t *testing.T) {
	code, out, errOut := cliAt(t, "http://127.0.0.1:1", "help")
	if code != 0 {
		t.Fatalf("help: %d %s", code, errOut)
	}
	_, list, _ := strings.Cut(out, "Available Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var inHelp []string
	for _, line := range strings.Split(list, "\n") {
		if name := strings.Fields(line)[0]; name != "help" {
			inHelp = append(inHelp, name)
		}
	}
	rows := map[string]string{} // command: the flags its rows name
	row := regexp.MustCompile("(?m)^\\| (`[^|]*(?:\\\\\\|[^|]*)*) \\|")
	for _, m := range row.FindAllStringSubmatch(readmeSection(t, "Command line"), -1) {
		for _, span := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(m[1], -1) {
			name := strings.Fields(span[1])[0]
			rows[name] += " " + span[1]
		}
	}
	var inREADME []string
	for name := range rows {
		inREADME = append(inREADME, name)
	}
	slices.Sort(inHelp)
	slices.Sort(inREADME)
	if !slices.Equal(inHelp, inREADME) {
		t.Errorf("README's commands %q, help's %q", inREADME, inHelp)
	}
	flag := regexp.MustCompile(`(?:^|[\s\[|(])(--?[a-z][a-z-]*)`)
	for _, name := range inHelp {
		_, usage, _ := cliAt(t, "http://127.0.0.1:1", name, "-h")
		own := flagsOf(usage)
		var said []string
		for _, m := range flag.FindAllStringSubmatch(rows[name], -1) {
			said = append(said, m[1])
		}
		for _, f := range said {
			if !slices.ContainsFunc(own, func(forms []string) bool { return slices.Contains(forms, f) }) {
				t.Errorf("README's %s row names %s; %s -h has no such flag", name, f, name)
			}
		}
		for _, forms := range own {
			global := slices.ContainsFunc(forms, func(f string) bool { return slices.Contains([]string{"--url", "--token", "--json", "--help"}, f) })
			if !global && !slices.ContainsFunc(forms, func(f string) bool { return slices.Contains(said, f) }) {
				t.Errorf("README's %s row does not name %s", name, strings.Join(forms, " or "))
			}
		}
	}
}

// flagsOf is every flag a command's help lists, each as it may be typed
// (-f, --follow).
func flagsOf(usage string) [][]string {
	var out [][]string
	_, text, _ := strings.Cut(usage, "\nFlags:\n")
	for _, line := range strings.Split(text, "\n") {
		var forms []string
		for _, f := range strings.Fields(strings.ReplaceAll(line, ",", " ")) {
			if !strings.HasPrefix(f, "-") {
				break
			}
			forms = append(forms, f)
		}
		if len(forms) > 0 {
			out = append(out, forms)
		}
	}
	return out
}

// man writes a page per command, and two independent checkers of man
// pages (mandoc's lint and groff's warnings) find nothing in them.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := cliAt(t, "http://127.0.0.1:1", "man", dir); code != 0 {
		t.Fatalf("man: %d %s", code, errOut)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	_, help, _ := cliAt(t, "http://127.0.0.1:1", "help")
	_, list, _ := strings.Cut(help, "Available Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	for _, line := range strings.Split(list, "\n") {
		name := strings.Fields(line)[0]
		page := filepath.Join(dir, "agent-control-plane-"+name+".1")
		if b, err := os.ReadFile(page); (err != nil || !strings.Contains(string(b), ".SH EXAMPLE")) && name != "help" {
			t.Errorf("%s: no page with examples (%v)", name, err)
		}
	}
	checkers := [][]string{{"mandoc", "-T", "lint", "-W", "warning"}, {"groff", "-man", "-ww", "-z"}}
	for _, c := range checkers {
		if _, err := exec.LookPath(c[0]); err != nil {
			t.Logf("no %s on PATH: the pages are not checked by it", c[0])
			continue
		}
		out, _ := exec.Command(c[0], append(c[1:], pages...)...).CombinedOutput()
		if len(out) > 0 {
			t.Errorf("%s: %s", strings.Join(c, " "), out)
		}
	}
}
