package fileops

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
)

// tarOf is a tar of the given entries: a name ending in "/" a directory,
// one with "->" a link, else a file whose content is its name.
func tarOf(t *testing.T, names ...string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		hdr := &tar.Header{Name: n, Mode: 0o640, Typeflag: tar.TypeReg, Size: int64(len(n))}
		if strings.HasSuffix(n, "/") {
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeDir, 0, 0o750
		} else if name, target, ok := strings.Cut(n, "->"); ok {
			hdr.Name, hdr.Linkname, hdr.Typeflag, hdr.Size = name, target, tar.TypeSymlink, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			tw.Write([]byte(n))
		}
	}
	tw.Close()
	return &b
}

// A tar round trip: what Tar writes of a directory, Untar makes again
// elsewhere, modes kept, links named as skipped.
func TestTarRoundTrip(t *testing.T) {
	f, dir := files(t)
	ctx := context.Background()
	got, err := Untar(ctx, f, "in/here", tarOf(t, "p/", "p/a", "p/sub/b", "p/l->a", "p/out->/etc/passwd"), 1<<20)
	if err != nil || got.Files != 2 || got.Dirs != 1 || got.Links != 2 || got.Bytes != int64(len("p/a")+len("p/sub/b")) || len(got.Skipped) != 0 {
		t.Fatalf("untar: %+v %v", got, err)
	}
	for name, mode := range map[string]os.FileMode{"in/here/p": os.ModeDir | 0o750, "in/here/p/a": 0o640, "in/here/p/sub/b": 0o640} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, mode)
		}
	}
	// A link is made as written, and never followed by what comes
	// after it: a file beneath the link that leads out is refused.
	if to, err := os.Readlink(filepath.Join(dir, "in/here/p/out")); err != nil || to != "/etc/passwd" {
		t.Errorf("the link: %q %v", to, err)
	}
	if _, err := Untar(ctx, f, "in/here", tarOf(t, "p/out/shadow"), 1<<20); err == nil {
		t.Error("a file beneath a link that leads out was written")
	}
	var out bytes.Buffer
	if err := Tar(ctx, f, "in/here/p", &out); err != nil {
		t.Fatal(err)
	}
	if _, err := Untar(ctx, f, "again", &out, 1<<20); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "again", "p", "sub", "b")); string(b) != "p/sub/b" {
		t.Fatalf("again/p/sub/b: %q", b)
	}
}

// A name not plainly beneath the directory, or content past the bound,
// fails the extraction, and what it had added goes; what was there stays.
func TestUntarRefusesAndRollsBack(t *testing.T) {
	f, dir := files(t)
	ctx := context.Background()
	os.WriteFile(filepath.Join(dir, "kept"), []byte("mine"), 0o644)
	for _, bad := range [][]string{{"new/", "new/a", "../escape"}, {"new/a", "/abs"}, {"new/a", "new/../../x"}, {"new/a", "new//b"}} {
		if _, err := Untar(ctx, f, ".", tarOf(t, bad...), 1<<20); !errors.Is(err, ErrArchive) {
			t.Errorf("%q: %v, want ErrArchive", bad, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
			t.Fatalf("%q left new behind: %v", bad, err)
		}
	}
	if _, err := Untar(ctx, f, "made/dir", tarOf(t, "a", "b", "c"), 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("past the bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); !os.IsNotExist(err) {
		t.Errorf("the bound left made/ behind: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "kept")); string(b) != "mine" {
		t.Errorf("a file that was there: %q", b)
	}
	if _, err := Untar(ctx, f, ".", strings.NewReader("not a tar at all, not at all, not at all"), 1<<20); !errors.Is(err, ErrArchive) {
		t.Errorf("not a tar: %v", err)
	}
}

// readOnlyDirs is a workspace whose directories refuse new files once
// their mode lacks the owner's write bit, as they do for a daemon that is
// not root (the tests run as root, which the kernel lets write anyway).
type readOnlyDirs struct {
	workspace.Files
	modes map[string]os.FileMode
}

func (r readOnlyDirs) Chmod(ctx context.Context, name string, perm os.FileMode) error {
	r.modes[name] = perm
	return r.Files.Chmod(ctx, name, perm)
}

func (r readOnlyDirs) Write(ctx context.Context, name string, rd io.Reader, perm os.FileMode) (int64, error) {
	if m, ok := r.modes[filepath.Dir(name)]; ok && m&0o200 == 0 {
		return 0, os.ErrPermission
	}
	return r.Files.Write(ctx, name, rd, perm)
}

// A read-only directory of the tar still takes its files: its mode is set
// once they are written.
func TestUntarReadOnlyDirectory(t *testing.T) {
	f, dir := files(t)
	ro := readOnlyDirs{Files: f, modes: map[string]os.FileMode{}}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555})
	tw.WriteHeader(&tar.Header{Name: "ro/a", Typeflag: tar.TypeReg, Mode: 0o444, Size: 1})
	tw.Write([]byte("a"))
	tw.Close()
	if _, err := Untar(context.Background(), ro, "x", &b, 1<<20); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "x", "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("ro: %v %v", fi.Mode(), err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x", "ro", "a")); err != nil || string(b) != "a" {
		t.Fatalf("ro/a: %q %v", b, err)
	}
}
