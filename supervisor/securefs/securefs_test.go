package securefs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The walk used where the kernel has no openat2 refuses the same things.
func TestOpenWithoutOpenat2(t *testing.T) {
	useOpenat2.Store(false)
	defer useOpenat2.Store(true)
	root := t.TempDir()
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o600)
	r.Mkdir("d", 0o700)
	os.WriteFile(filepath.Join(root, "d", "own"), []byte("own"), 0o600)
	os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "d", "link"))
	os.Symlink(outside, filepath.Join(root, "dirlink"))
	if b, err := r.ReadFile("d/own", 100); err != nil || string(b) != "own" {
		t.Fatalf("own file: %q %v", b, err)
	}
	for _, rel := range []string{"d/link", "dirlink/f", "../" + filepath.Base(outside) + "/f", "d/../d/own"} {
		if b, err := r.ReadFile(rel, 100); err == nil {
			t.Errorf("%s: read %q through a link or out of the root", rel, b)
		}
	}
	if err := r.WriteAtomic("dirlink", "f", ".f.tmp", 0o600, NoSync, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err }); err == nil {
		t.Error("wrote through a linked directory")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "outside" {
		t.Fatalf("outside file changed: %q", b)
	}
}

// Every Sync mode replaces the content whole, with the mode asked for,
// and leaves no temporary file; a failed fill leaves the old content.
func TestWriteAtomicSyncModes(t *testing.T) {
	root := t.TempDir()
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Mkdir("d", 0o700)
	for i, sync := range []Sync{NoSync, SyncBeforeRename, SyncAfterRename} {
		want := []byte{'a' + byte(i)}
		if err := r.WriteAtomic("d", "f", ".f.tmp", 0o640, sync, func(w io.Writer) error { _, err := w.Write(want); return err }); err != nil {
			t.Fatalf("sync %d: %v", sync, err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "d", "f")); string(b) != string(want) {
			t.Errorf("sync %d: content %q, want %q", sync, b, want)
		}
		if fi, err := os.Stat(filepath.Join(root, "d", "f")); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("sync %d: mode %v %v", sync, fi.Mode(), err)
		}
		fail := errors.New("fill failed")
		if err := r.WriteAtomic("d", "f", ".f.tmp", 0o640, sync, func(w io.Writer) error { w.Write([]byte("partial")); return fail }); !errors.Is(err, fail) {
			t.Errorf("sync %d: failed fill: %v", sync, err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "d", "f")); string(b) != string(want) {
			t.Errorf("sync %d: a failed fill changed the content to %q", sync, b)
		}
		if names, _ := os.ReadDir(filepath.Join(root, "d")); len(names) != 1 {
			t.Errorf("sync %d: left %v", sync, names)
		}
	}
}

// A tree deeper than the process may hold descriptors (a workload can
// build one with renames) is removed whole: the removal holds at most
// MaxOpenInRemove directories open, however deep. Before, it held one per
// level, failed with EMFILE at 30,000 and left the tree.
func TestRemoveDeepTree(t *testing.T) {
	root := t.TempDir()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Mkdirat(fd, "deep", 0o755)
	cur, _ := unix.Openat(fd, "deep", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	unix.Close(fd)
	const depth = 30000
	for i := range depth {
		if err := unix.Mkdirat(cur, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			unix.Mknodat(cur, "file", unix.S_IFREG|0o644, 0)
		}
		next, err := unix.Openat(cur, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(cur)
		cur = next
	}
	unix.Close(cur)
	// A descriptor limit far below the depth, for the removal alone.
	var was syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was)
	low := was
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Remove("deep", true)
	d.Close()
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was)
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("left: %v", ents)
	}
}
