package securefs

import (
	"io"
	"os"
	"path/filepath"
	"testing"
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
	if err := r.WriteAtomic("dirlink", "f", ".f.tmp", 0o600, false, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err }); err == nil {
		t.Error("wrote through a linked directory")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f")); string(b) != "outside" {
		t.Fatalf("outside file changed: %q", b)
	}
}
