package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// homeLike fills dir with what a home directory holds: dot files,
// documents, a project whose directory name passes the sandbox name rule,
// and one that even holds a sandbox.json of its own.
func homeLike(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		".bashrc":                          "export PS1='$ '\n",
		"notes.txt":                        "remember the milk\n",
		"Documents/thesis.md":              "# Chapter 1\n",
		"projects/site/index.html":         "<h1>hi</h1>\n",
		"projects/site/sandbox.json":       `{"version":2,"id":"site"}`,
		"Downloads/.trash-abc-def/keep.me": "a directory named like a trash entry\n",
		".new-0011-2233/keep.me":           "a directory named like a staging entry\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("/etc/hostname", filepath.Join(dir, "link"))
}

// tree fingerprints every entry under dir: path, type, mode and content.
func tree(t *testing.T, dir string, skip ...string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		fi, _ := d.Info()
		line := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// A directory that holds anything and has no root mark is refused, and
// nothing in it is touched or added.
func TestPopulatedRootRefused(t *testing.T) {
	home := t.TempDir()
	homeLike(t, home)
	before := tree(t, home)
	for range 2 {
		_, err := New(context.Background(), Options{Root: home, PortLo: 1, PortHi: 2, Runtimes: registry(&fake.Runtime{M: fake.NewMachine()})})
		if !errors.Is(err, ErrRootNotOurs) {
			t.Fatalf("New on a populated directory: %v, want ErrRootNotOurs", err)
		}
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "empty or new directory") {
			t.Fatalf("refusal is not one line saying what to do: %q", err)
		}
	}
	if after := tree(t, home); after != before {
		t.Fatalf("refused root changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// An empty directory is taken and marked; a new one is made.
	for _, root := range []string{t.TempDir(), filepath.Join(t.TempDir(), "a", "b")} {
		s, err := New(context.Background(), Options{Root: root, PortLo: 1, PortHi: 2, Runtimes: registry(&fake.Runtime{M: fake.NewMachine()})})
		if err != nil {
			t.Fatal(err)
		}
		s.Close(context.Background())
		if _, err := os.Stat(filepath.Join(root, MarkFile)); err != nil {
			t.Fatalf("root not marked: %v", err)
		}
	}
}

// Whatever the daemon did not create survives restarts, deletes of its
// name and creates of its name; the daemon's own sandbox beside it works.
func TestStraysSurvive(t *testing.T) {
	h := newHarness(t, nil)
	h.create("mine", nil, nil)
	h.waitState("mine", Started)
	h.close(false)
	homeLike(t, h.opts.Root)
	os.Mkdir(filepath.Join(h.opts.Root, "empty"), 0o755)
	// A record of another root, in a directory whose name it claims.
	os.MkdirAll(filepath.Join(h.opts.Root, "other"), 0o755)
	other, _ := json.Marshal(Record{Version: recordVersion, ID: "other", RootID: "someone-else", State: Stopped, Marker: "other.1"})
	os.WriteFile(filepath.Join(h.opts.Root, "other", RecordFile), other, 0o600)
	strays := tree(t, h.opts.Root, "mine", lockFile)

	h.start()
	h.restart()
	ctx := context.Background()
	for _, name := range []string{"Documents", "notes.txt", "projects", "other", "empty", ".bashrc", "link", ".new-0011-2233", "Downloads"} {
		if err := h.sup.Delete(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	for _, name := range []string{"Documents", "projects", "other", "empty"} {
		if _, err := h.sup.Create(ctx, CreateRequest{Name: name}); !isErr(err, ErrConflict) {
			t.Fatalf("create %s over a stray: %v, want ErrConflict", name, err)
		}
	}
	if sb, err := h.sup.Get("mine"); err != nil || sb.State != Started {
		t.Fatalf("own sandbox beside strays: %+v %v", sb, err)
	}
	// Compared with the daemon closed: a running one keeps spare staging
	// directories of its own in the root (see spares), and Close removes
	// them.
	h.close(false)
	if after := tree(t, h.opts.Root, "mine", lockFile); after != strays {
		t.Fatalf("strays changed:\nbefore:\n%s\nafter:\n%s", strays, after)
	}
	h.start()
	if err := h.sup.Delete(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.opts.Root, "mine")); !os.IsNotExist(err) {
		t.Fatalf("own sandbox directory not removed: %v", err)
	}
	h.close(false)
	if after := tree(t, h.opts.Root, lockFile); after != strays {
		t.Fatalf("strays changed by deleting a sandbox:\nbefore:\n%s\nafter:\n%s", strays, after)
	}
}

// Interrupted creates and deletes leave directories whose names prove they
// are the daemon's: they are removed at the next start.
func TestOwnTempDirectoriesSwept(t *testing.T) {
	h := newHarness(t, nil)
	h.close(false)
	off := h.offline()
	stage, trash := off.fs.tempName(kindNew), off.fs.tempName(kindTrash)
	for _, d := range []string{stage, trash, trash + "/workspace"} {
		if err := off.fs.mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(h.opts.Root, trash, "workspace", "f"), []byte("x"), 0o600)
	h.start()
	for _, d := range []string{stage, trash} {
		if _, err := os.Lstat(filepath.Join(h.opts.Root, d)); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", d, err)
		}
	}
}

// A write cut by a crash (a log rotation, a record) leaves a temporary
// file whose name proves it the daemon's: the next start removes it, in
// the root and in a sandbox's directory; a look-alike is left.
func TestOwnTempFilesSwept(t *testing.T) {
	h := newHarness(t, nil)
	h.create("tmp", nil, nil)
	h.waitState("tmp", Started)
	h.close(false)
	off := h.offline()
	own := []string{"tmp/" + off.fs.tempFileName(logcap.Stdout+logcap.RotatedSuffix), "tmp/" + off.fs.tempFileName(RecordFile), off.fs.tempFileName(MarkFile)}
	alike := []string{"tmp/." + logcap.Stdout + logcap.RotatedSuffix + ".tmp-0123456789abcdef-00", "tmp/.mine.tmp-1"}
	for _, f := range append(own, alike...) {
		if err := os.WriteFile(filepath.Join(h.opts.Root, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.start()
	for _, f := range own {
		if _, err := os.Lstat(filepath.Join(h.opts.Root, f)); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
	for _, f := range alike {
		if _, err := os.Lstat(filepath.Join(h.opts.Root, f)); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
	h.waitState("tmp", Started)
}

// Logs are opened as the daemon's own files: a link serves nothing from
// outside, a FIFO answers at once.
func TestPlantedLogs(t *testing.T) {
	h := newHarness(t, nil)
	h.create("linked", nil, nil)
	h.create("fifo", nil, nil)
	h.waitState("linked", Started)
	h.waitState("fifo", Started)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(outside, []byte("OUTSIDE-CONTENT\n"), 0o600)
	stdout := filepath.Join(h.opts.Root, "linked", logcap.Stdout)
	os.Remove(stdout)
	if err := os.Symlink(outside, stdout); err != nil {
		t.Fatal(err)
	}
	logs, err := h.sup.EntrypointLogs(context.Background(), "linked", LogQuery{})
	if strings.Contains(logs.Stdout+logs.Stderr, "OUTSIDE") {
		t.Fatal("a symlinked log served content from outside the root")
	}
	if !errors.Is(err, securefs.ErrNotOwnFile) {
		t.Fatalf("symlinked log: %v, want securefs.ErrNotOwnFile", err)
	}

	stderr := filepath.Join(h.opts.Root, "fifo", logcap.Stderr)
	os.Remove(stderr)
	if err := unix.Mkfifo(stderr, 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader blocked in open() would never return; 20 at once would pin
	// 20 threads. Every call must come back (goleak checks the rest).
	done := make(chan error, 20)
	for range 20 {
		go func() {
			_, err := h.sup.EntrypointLogs(context.Background(), "fifo", LogQuery{})
			done <- err
		}()
	}
	deadline := time.After(30 * time.Second)
	for range 20 {
		select {
		case err := <-done:
			if !errors.Is(err, securefs.ErrNotOwnFile) {
				t.Fatalf("FIFO log: %v, want securefs.ErrNotOwnFile", err)
			}
		case <-deadline:
			t.Fatal("a read of a FIFO log is stuck")
		}
	}
	// The sandbox is still deleted cleanly.
	if err := h.sup.Delete(context.Background(), "fifo"); err != nil {
		t.Fatal(err)
	}
}

// A lock file replaced by a link or a FIFO is refused; the link's target is
// neither truncated nor written.
func TestPlantedLock(t *testing.T) {
	h := newHarness(t, nil)
	h.close(false)
	lock := filepath.Join(h.opts.Root, lockFile)
	outside := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(outside, []byte("precious data\n"), 0o600)
	os.Remove(lock)
	os.Symlink(outside, lock)
	if _, err := New(context.Background(), h.opts); err == nil {
		t.Fatal("started with the lock a symbolic link")
	}
	if b, _ := os.ReadFile(outside); string(b) != "precious data\n" {
		t.Fatalf("lock link target changed: %q", b)
	}
	os.Remove(lock)
	unix.Mkfifo(lock, 0o600)
	if _, err := New(context.Background(), h.opts); err == nil {
		t.Fatal("started with the lock a FIFO")
	}
}

// A sandbox directory that is a link is refused at load and left alone.
func TestSymlinkedSandboxDirRefused(t *testing.T) {
	h := newHarness(t, nil)
	h.create("real", nil, nil)
	h.waitState("real", Started)
	h.close(true)
	elsewhere := t.TempDir()
	os.Rename(filepath.Join(h.opts.Root, "real"), filepath.Join(elsewhere, "real"))
	os.Symlink(filepath.Join(elsewhere, "real"), filepath.Join(h.opts.Root, "real"))
	h.start()
	if _, err := h.sup.Get("real"); !isErr(err, ErrNotFound) {
		t.Fatalf("sandbox behind a link loaded: %v", err)
	}
	h.sup.Delete(context.Background(), "real")
	if _, err := os.Stat(filepath.Join(elsewhere, "real", RecordFile)); err != nil {
		t.Fatalf("link target touched: %v", err)
	}
}

// A record whose pgid was changed to a stranger's: the stranger survives,
// the real child is stopped.
func TestPlantedGroupLeavesStrangerAlive(t *testing.T) {
	h := realHarness(t, nil)
	h.create("victim", nil, nil)
	h.waitState("victim", Started)
	child := h.pid("victim")
	h.close(false)
	stranger := testenv.ForeignProcess(t)
	h.editRecord("victim", func(r *Record) {
		var id map[string]any
		json.Unmarshal(r.Handle.Data, &id)
		id["pgid"] = stranger
		r.Handle.Data, _ = json.Marshal(id)
	})
	h.start()
	sb, err := h.sup.Stop(context.Background(), "victim", false)
	if err != nil || sb.State != Stopped {
		t.Fatalf("stop: %+v %v", sb, err)
	}
	testenv.Eventually(t, "the real child gone", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		return len(b) == 0 || strings.Contains(string(b), ") Z ")
	})
	if err := syscall.Kill(stranger, 0); err != nil {
		t.Fatalf("the stranger was killed: %v", err)
	}
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(stranger, &ws, syscall.WNOHANG, nil); wpid != 0 {
		t.Fatalf("the stranger exited: %v", ws)
	}
}

// Modes do not depend on the umask: records and logs 0600, directories
// 0700.
func TestFileModesWhateverTheUmask(t *testing.T) {
	for _, mask := range []int{0o000, 0o077, 0o777} {
		t.Run(fmt.Sprintf("umask%03o", mask), func(t *testing.T) {
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			root := filepath.Join(t.TempDir(), "new-root")
			h := newHarness(t, func(o *Options) { o.Root = root })
			h.create("m", nil, nil)
			h.waitState("m", Started)
			want := map[string]fs.FileMode{
				".":                  0o700 | fs.ModeDir,
				MarkFile:             0o600,
				lockFile:             0o600,
				"m":                  0o700 | fs.ModeDir,
				"m/" + WorkspaceDir:  0o700 | fs.ModeDir,
				"m/" + RecordFile:    0o600,
				"m/" + EnvFile:       0o600,
				"m/" + logcap.Stdout: 0o600,
				"m/" + logcap.Stderr: 0o600,
			}
			for rel, mode := range want {
				fi, err := os.Lstat(filepath.Join(root, rel))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode() != mode {
					t.Errorf("%s: mode %v, want %v", rel, fi.Mode(), mode)
				}
			}
		})
	}
}
