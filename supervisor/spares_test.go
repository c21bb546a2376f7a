package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// spareInodes maps the inode of each spare staging directory in root to
// its name; own proves a name the root's (rootFS.ownTemp).
func spareInodes(t *testing.T, root string, own func(string) bool) map[uint64]string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]string{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "."+kindNew+"-") || !own(e.Name()) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[fi.Sys().(*syscall.Stat_t).Ino] = e.Name()
	}
	return out
}

// A create starts from a spare made ahead (no inode is allocated before
// its spawn), made before the daemon serves; spares are made again once
// it has started; a burst beyond
// them makes its own; Close removes what is left.
func TestSpares(t *testing.T) {
	h := newHarness(t, nil)
	// Ready spares, as the supervisor counts them (a directory appears in
	// the root before it is complete).
	count := func() int {
		h.sup.spares.mu.Lock()
		defer h.sup.spares.mu.Unlock()
		return len(h.sup.spares.ready)
	}
	// Made before the daemon serves, not beside it.
	if n := count(); n != spareDirs {
		t.Fatalf("%d spares ready when New returned, want %d", n, spareDirs)
	}
	own := h.sup.fs.ownTemp
	spares := spareInodes(t, h.opts.Root, own)
	if len(spares) != spareDirs {
		t.Fatalf("%d spare directories in the root, want %d: %v", len(spares), spareDirs, spares)
	}
	for _, name := range spares {
		for _, f := range stagedFiles {
			fi, err := os.Lstat(filepath.Join(h.opts.Root, name, f))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 0 {
				t.Fatalf("spare %s: %s is not an empty 0600 file: %v %v", name, f, fi, err)
			}
		}
		if fi, err := os.Lstat(filepath.Join(h.opts.Root, name, WorkspaceDir)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("spare %s: no 0700 workspace: %v %v", name, fi, err)
		}
	}

	h.create("a", map[string]string{"K": "v"}, nil)
	fi, err := os.Lstat(filepath.Join(h.opts.Root, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := spares[fi.Sys().(*syscall.Stat_t).Ino]; !ok {
		t.Fatalf("a's directory was not one of the spares %v", spares)
	}
	h.waitState("a", Started)
	if env, err := h.sup.envByID("a"); err != nil || env["K"] != "v" {
		t.Fatalf("a's environment from a spare: %v %v", env, err)
	}
	testenv.Eventually(t, "spares made again after a start", func() bool { return count() == spareDirs })

	for i := range spareDirs + 2 {
		h.create("burst"+string(rune('0'+i)), nil, nil)
	}
	for i := range spareDirs + 2 {
		h.waitState("burst"+string(rune('0'+i)), Started)
	}

	h.close(false)
	if left := spareInodes(t, h.opts.Root, own); len(left) != 0 {
		t.Fatalf("spares left after Close: %v", left)
	}
}

// A staging directory that cannot be completed is removed whole.
func TestStageFailureLeavesNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.close(false)
	before := tree(t, h.opts.Root)
	off := h.offline()
	saved := stagedFiles
	stagedFiles = []string{EnvFile, "../" + RecordFile} // refused by the root's resolver, after the first file
	defer func() { stagedFiles = saved }()
	if name, err := off.fs.stage(); err == nil {
		t.Fatalf("stage made %s with a file outside it", name)
	}
	if after := tree(t, h.opts.Root); after != before {
		t.Fatalf("a failed stage left something:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
