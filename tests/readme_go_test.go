package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// README's Go client section, followed as a user of another module
// would: its two commands make a module of the test's depend on this
// checkout, and every Go block, each a whole file, builds and vets there,
// offline (no proxy, no checksum database: the module cache only).
func TestREADMEGoBlocksBuild(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		t.Skip("no go toolchain beside the test's: the README's Go cannot be built")
	}
	checkout, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, "Go client")
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 2 {
		t.Fatalf("the Go client section has %d Go blocks", len(blocks))
	}
	mod := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("mod", "init", "example.com/readme")
	for i, b := range blocks {
		dir := filepath.Join(mod, "block"+strconv.Itoa(i+1))
		os.Mkdir(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commands := regexp.MustCompile(`(?m)^\$ go (.*)$`).FindAllStringSubmatch(section, -1)
	if len(commands) == 0 {
		t.Fatal("the Go client section says no go command to depend on the module")
	}
	for _, c := range commands {
		line := strings.ReplaceAll(c[1], "=../agent-control-plane", "="+checkout)
		run(strings.Fields(line)...)
	}
	run("build", "./...")
	run("vet", "./...")
}
