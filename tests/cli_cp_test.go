package tests

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// cp copies as docker cp does: a directory both ways with its modes (an
// executable stays 0755), into a directory that does not exist (it is
// made, parents too), as a tar stream on "-" both ways, from and into a
// stopped sandbox; and it refuses with the real reason. It is long
// because it walks one project through every way in and out of one
// sandbox.
func TestCLICopies(t *testing.T) {
	d := startDaemon(t)
	if code, _, errs := cli(t, d, "create", "cp1", "--wait"); code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	ws := filepath.Join(d.Root, "cp1", supervisor.WorkspaceDir)
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "bin"), 0o750)
	os.WriteFile(filepath.Join(src, "bin", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.WriteFile(filepath.Join(src, "README"), []byte("read me\n"), 0o600)
	os.Symlink("README", filepath.Join(src, "link"))

	// In: a directory into a directory that does not exist, parents too.
	code, _, errs := cli(t, d, "cp", src, "cp1:deep/new/")
	if code != 0 || !strings.Contains(errs, "2 files, 2 directories, 1 link") {
		t.Fatalf("cp dir in: %d %q", code, errs)
	}
	checkTree(t, filepath.Join(ws, "deep", "new", "proj"))
	if to, err := os.Readlink(filepath.Join(ws, "deep", "new", "proj", "link")); err != nil || to != "README" {
		t.Fatalf("the link copied in: %q %v", to, err)
	}
	// A file into a missing directory named with a trailing slash.
	if code, _, errs := cli(t, d, "cp", filepath.Join(src, "README"), "cp1:docs/"); code != 0 {
		t.Fatalf("cp file into docs/: %d %q", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "docs", "README")); err != nil || string(b) != "read me\n" {
		t.Fatalf("docs/README: %q %v", b, err)
	}
	// By the exec, the copied script runs inside.
	if code, out, errs := cli(t, d, "exec", "cp1", "deep/new/proj/bin/run.sh"); code != 0 || out != "ran\n" {
		t.Fatalf("run the copied script: %d %q %q", code, out, errs)
	}

	// Out: to a destination that does not exist, the directory becomes it.
	back := filepath.Join(t.TempDir(), "back")
	if code, _, errs := cli(t, d, "cp", "cp1:deep/new/proj", back); code != 0 {
		t.Fatalf("cp dir out: %d %q", code, errs)
	}
	checkTree(t, back)
	if to, err := os.Readlink(filepath.Join(back, "link")); err != nil || to != "README" {
		t.Fatalf("the link copied out: %q %v", to, err)
	}
	// Into an existing directory: beneath it.
	into := t.TempDir()
	if code, _, errs := cli(t, d, "cp", "cp1:deep/new/proj", into); code != 0 {
		t.Fatalf("cp dir out into: %d %q", code, errs)
	}
	checkTree(t, filepath.Join(into, "proj"))

	// NAME:dir/. is dir's content, into an existing directory.
	content := t.TempDir()
	if code, _, errs := cli(t, d, "cp", "cp1:deep/new/proj/.", content); code != 0 {
		t.Fatalf("cp dir/. out: %d %q", code, errs)
	}
	checkTree(t, content)
	// --json: what it made, as one object.
	if code, out, _ := cli(t, d, "--json", "cp", filepath.Join(src, "README"), "cp1:docs/"); code != 0 || !strings.Contains(out, `"destination": "cp1:docs/README"`) || !strings.Contains(out, `"files": 1`) {
		t.Fatalf("cp --json: %d %q", code, out)
	}
	// "-": a tar on stdout, and one on stdin.
	code, out, errs := cli(t, d, "cp", "cp1:deep/new/proj", "-")
	names := tarNames(t, out)
	if code != 0 || !names["proj/bin/run.sh"] || !names["proj/README"] {
		t.Fatalf("cp out -: %d %v %q", code, names, errs)
	}
	cmd := cliCmd(t, d, "cp", "-", "cp1:from-tar")
	cmd.Stdin = strings.NewReader(out)
	if code, _, errs := runCmd(t, cmd); code != 0 {
		t.Fatalf("cp - in: %d %q", code, errs)
	}
	checkTree(t, filepath.Join(ws, "from-tar", "proj"))

	// Stopped: its files are on disk, both ways.
	if code, _, errs := cli(t, d, "stop", "cp1"); code != 0 {
		t.Fatalf("stop: %d %q", code, errs)
	}
	stopped := filepath.Join(t.TempDir(), "stopped")
	if code, _, errs := cli(t, d, "cp", "cp1:deep/new/proj", stopped); code != 0 {
		t.Fatalf("cp out of a stopped sandbox: %d %q", code, errs)
	}
	checkTree(t, stopped)
	if code, _, errs := cli(t, d, "cp", filepath.Join(src, "README"), "cp1:while-stopped"); code != 0 {
		t.Fatalf("cp into a stopped sandbox: %d %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "while-stopped")); err != nil {
		t.Fatal(err)
	}

	// Refusals that name the problem.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cp", "cp1:no-such", t.TempDir()}, "not_found"},
		{[]string{"cp", filepath.Join(src, "nope"), "cp1:x"}, "no such file or directory"},
		{[]string{"cp", src, "cp1:docs/README"}, "cannot copy directory"},
		{[]string{"cp", "cp1:deep", filepath.Join(back, "README")}, "cannot copy directory"},
		{[]string{"cp", "cp1:../../etc", t.TempDir()}, "path_outside"},
		{[]string{"cp", "cp1:a", "cp1:b"}, "one side is a sandbox"},
		{[]string{"cp", "nope:a", "b"}, "not_found"},
	} {
		if code, _, errs := cli(t, d, c.args...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %q; want %q", c.args, code, errs, c.want)
		}
	}
}

// checkTree checks a copy of the test's project: the script still
// 0755, the README 0600, the directories' modes kept.
func checkTree(t *testing.T, root string) {
	t.Helper()
	for name, want := range map[string]os.FileMode{"bin": 0o750 | os.ModeDir, "bin/run.sh": 0o755, "README": 0o600} {
		fi, err := os.Stat(filepath.Join(root, name))
		if err != nil || fi.Mode() != want {
			t.Fatalf("%s/%s: %v %v, want %v", root, name, fi.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "bin", "run.sh")); string(b) != "#!/bin/sh\necho ran\n" {
		t.Fatalf("%s/bin/run.sh: %q", root, b)
	}
}

func tarNames(t *testing.T, s string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader([]byte(s)))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("not a tar: %v", err)
		}
		names[hdr.Name] = true
	}
}
