package tests

import (
	"flag"
	"fmt"
	"go/build"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agent-control-plane/agent-control-plane/"

// room is one rule of the module's layering: the package Pkg must not
// depend, directly or through another of the module's packages, on any
// package Not matches, unless But matches it. A pattern is a package path
// below the module, "X/..." for X and every package below it, or "..."
// for every package.
type room struct {
	Pkg, Why string
	Not, But []string
}

// implementations are the runtimes: only the daemon's wiring (cmd) names
// one.
var implementations = []string{"supervisor/runtime/native", "supervisor/runtime/docker/...", "supervisor/runtime/fake", "supervisor/runtime/workspace", "supervisor/runtime/runtimetest"}

var runtimeRule = room{Not: []string{"supervisor", "api/...", "conf/...", "cmd/..."},
	Why: "a runtime implements the contract; it knows no policy, no HTTP, no configuration"}

var rooms = []room{
	{Pkg: "supervisor/runtime", Not: []string{"..."}, Why: "the contract is a leaf: every runtime and the supervisor import it, it imports nothing of ours"},
	{Pkg: "supervisor", Not: append([]string{"proc/...", "cgroup/...", "api/...", "conf/...", "cmd/..."}, implementations...), But: []string{"proc/probe"},
		Why: "the supervisor drives workloads only through the contract; runtimes are wired in by the daemon"},
	withPkg(runtimeRule, "supervisor/runtime/native"),
	{Pkg: "supervisor/runtime/native/isolate", Not: []string{"..."}, Why: "the sandbox's init runs inside the sandbox, re-executed from any binary that links it: it knows namespaces and its socket, nothing of ours"},
	withPkg(runtimeRule, "supervisor/runtime/docker"),
	withPkg(runtimeRule, "supervisor/runtime/fake"),
	withPkg(runtimeRule, "supervisor/runtime/workspace"),
	{Pkg: "supervisor/securefs", Not: []string{"..."}, Why: "the secure filesystem layer is a leaf: the root's files and the workspaces' go through it"},
	{Pkg: "supervisor/logcap", Not: []string{"..."}, But: []string{"supervisor/securefs"}, Why: "the log rotator and follower know files, not sandboxes"},
	{Pkg: "supervisor/limits", Not: []string{"..."}, But: []string{"supervisor/runtime", "supervisor/field"}, Why: "the bounds of limits in the core's units and the conversions from people's units, shared by the faces, the configuration and the supervisor"},
	{Pkg: "supervisor/field", Not: []string{"..."}, Why: "the core's field errors, which every face renders with its own field names: standard library only"},
	{Pkg: "supervisor/fileops", Not: []string{"..."}, But: []string{"supervisor/runtime"}, Why: "work over many files reaches them through the contract's Files, bounded, knowing no face"},
	{Pkg: "supervisor/snapshot", Not: []string{"..."}, Why: "what a snapshot says, shared by the configuration and the supervisor"},
	{Pkg: "cgroup", Not: []string{"supervisor/...", "api/...", "conf/...", "cmd/..."}, Why: "cgroup knows kernels, not sandboxes: it declares its own limit and usage types"},
	{Pkg: "proc", Not: []string{"..."}, Why: "proc knows one OS process, nothing above it"},
	{Pkg: "proc/probe", Not: []string{"..."}, Why: "the one backoff and probe: imported by the daemon and the client alike"},
	{Pkg: "conf", Not: []string{"api/...", "supervisor", "cmd/...", "proc/...", "cgroup/..."},
		Why: "configuration reads files into values; it imports the vocabulary it fills, never the policy that uses it"},
	{Pkg: "conf/auth", Not: []string{"..."}, Why: "the token is read by the daemon and every client: standard library only"},
	{Pkg: "api/client", Not: []string{"supervisor/...", "conf", "proc", "cgroup/...", "api"}, Why: "the Go client is a small library: the wire shapes, the token, the backoff"},
	{Pkg: "api/wire", Not: []string{"..."}, Why: "the wire shapes are shared with every client: standard library only"},
	{Pkg: "api/daytona", Not: append([]string{"api", "api/client", "api/signin", "proc/...", "cgroup/...", "conf/...", "cmd/..."}, implementations...), But: []string{"proc/probe"},
		Why: "Daytona's API is a room beside /v1: it knows the supervisor and the wire shapes, and package api mounts it, not the other way"},
	{Pkg: "api/host", Not: append([]string{"api", "api/daytona", "api/client", "proc", "cgroup/...", "conf", "cmd/..."}, implementations...),
		Why: "the host serves faces it is given and imports none: each face declares its routes, their access, body and error shape"},
	{Pkg: "api", Not: append([]string{"proc", "cgroup/...", "conf", "cmd/..."}, implementations...),
		Why: "the API serves the supervisor; runtimes and configuration are the daemon's wiring"},
	{Pkg: "cmd/agent-control-plane", Not: []string{"supervisor/runtime/fake", "supervisor/runtime/runtimetest"},
		Why: "the product binary links no test tool"},
	{Pkg: "cmd/agent-control-plane/internal/daemon", Not: []string{"cmd/...", "api/client"},
		Why: "the daemon's start-up is handed its configuration; it reads no command line and is no client"},
	{Pkg: "cmd/agent-control-plane/internal/service", Not: []string{"..."},
		Why: "the installer knows units, files and the user manager: standard library and go-systemd only"},
	{Pkg: "cmd/agent-control-plane/internal/stub", Not: []string{"..."},
		Why: "the stub agent is a stand-alone program: standard library only"},
}

func withPkg(r room, pkg string) room { r.Pkg = pkg; return r }

// Each room's rule holds for its package, also through the module's other
// packages.
func TestRooms(t *testing.T) {
	imports := modulePackages(t)
	for _, r := range rooms {
		if _, ok := imports[r.Pkg]; !ok {
			t.Errorf("rule for %s: no such package", r.Pkg)
		}
		for _, dep := range closure(imports, r.Pkg) {
			if dep != r.Pkg && matchAny(dep, r.Not) && !matchAny(dep, r.But) {
				t.Errorf("%s depends on %s: %s", r.Pkg, dep, r.Why)
			}
		}
	}
}

func matchAny(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "/..."); ok && (pkg == base || strings.HasPrefix(pkg, base+"/")) || p == "..." || p == pkg {
			return true
		}
	}
	return false
}

// modulePackages maps each of the module's non-test packages (by path
// below the module) to the module packages it imports.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || rel == "tests" || strings.HasPrefix(rel, "tests/") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		var deps []string
		for _, imp := range pkg.Imports {
			if p, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, p)
			}
		}
		out[rel] = deps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// closure is pkg and every module package it depends on.
func closure(imports map[string][]string, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, d := range imports[p] {
			walk(d)
		}
	}
	walk(pkg)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

var updateDiagram = flag.Bool("update", false, "rewrite the rooms diagram in docs/design.md")

// diagramStart and diagramEnd enclose the diagram in docs/design.md.
const (
	diagramStart = "<!-- rooms: generated by tests/rooms_test.go from the imports (go test ./tests -run Diagram -update) -->\n```\n"
	diagramEnd   = "```\n"
)

// roomsDiagram is every package of the module and the module packages it
// imports, one line each.
func roomsDiagram(imports map[string][]string) string {
	pkgs := slices.Sorted(maps.Keys(imports))
	width := 0
	for _, p := range pkgs {
		width = max(width, len(p))
	}
	var b strings.Builder
	for _, p := range pkgs {
		if p == "." {
			continue
		}
		deps := slices.Sorted(slices.Values(imports[p]))
		if len(deps) == 0 {
			fmt.Fprintf(&b, "%s\n", p)
			continue
		}
		fmt.Fprintf(&b, "%-*s ──► %s\n", width, p, strings.Join(deps, ", "))
	}
	return b.String()
}

// docs/design.md's diagram of the rooms is the module's imports as they
// are: a package added, moved or given a new import changes it.
func TestDesignDiagram(t *testing.T) {
	path := filepath.Join("..", "docs", "design.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, diagramStart)
	if i < 0 {
		t.Fatalf("%s has no rooms diagram (a line %q)", path, strings.TrimSuffix(diagramStart, "\n```\n"))
	}
	i += len(diagramStart)
	n := strings.Index(s[i:], diagramEnd)
	if n < 0 {
		t.Fatalf("%s: the rooms diagram is not closed", path)
	}
	want := roomsDiagram(modulePackages(t))
	if *updateDiagram {
		if err := os.WriteFile(path, []byte(s[:i]+want+s[i+n:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := s[i : i+n]; got != want {
		t.Errorf("%s's rooms diagram is not the imports (go test ./tests -run Diagram -update); the imports are:\n%s", path, want)
	}
}
