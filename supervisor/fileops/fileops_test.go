package fileops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	sruntime "github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
)

func files(t *testing.T) (workspace.Files, string) {
	dir := t.TempDir()
	return workspace.Files{Host: dir, Seen: dir}, dir
}

func find(t *testing.T, f workspace.Files, pattern string) []Match {
	t.Helper()
	var out []Match
	if err := Find(context.Background(), f, ".", pattern, func(m Match) error { out = append(out, m); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFindLines(t *testing.T) {
	f, dir := files(t)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one needle\ntwo\nneedle three"), 0o644)
	os.WriteFile(filepath.Join(dir, "bin"), []byte("needle\x00"), 0o644)
	os.WriteFile(filepath.Join(dir, "bin2"), []byte("needle first\nthen \x00 on the second line\n"), 0o644)
	// A pattern across the reader's 64 KiB blocks.
	os.WriteFile(filepath.Join(dir, "span.txt"), []byte("x\n"+strings.Repeat("y", 64<<10-5)+"nee"+"dle\n"), 0o644)
	got := find(t, f, "needle")
	want := []Match{{"a.txt", 1, "one needle"}, {"a.txt", 3, "needle three"}, {"span.txt", 2, strings.Repeat("y", MaxContent) + "…"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("matches:\n got %.300v\nwant %.300v", got, want)
	}
}

// One 8 MiB line, reached by 100 hard links: found once, its content
// cut, and the find's memory stays far below the file's size.
func TestFindBoundedOnAPlantedFile(t *testing.T) {
	f, dir := files(t)
	line := bytes.Repeat([]byte("ab"), 4<<20)
	copy(line[len(line)/2:], "needle")
	os.WriteFile(filepath.Join(dir, "big"), line, 0o644)
	for i := range 100 {
		if err := os.Link(filepath.Join(dir, "big"), filepath.Join(dir, fmt.Sprint("link", i))); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got := find(t, f, "needle")
	runtime.ReadMemStats(&after)
	if len(got) != 1 || len(got[0].Content) > MaxContent+len("…") || got[0].Line != 1 {
		t.Fatalf("%d matches, the first %.100v", len(got), got)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("the find allocated %d bytes for one 8 MiB line", alloc)
	}
}

func TestFindStopsAtMaxMatches(t *testing.T) {
	f, dir := files(t)
	os.WriteFile(filepath.Join(dir, "m"), bytes.Repeat([]byte("x\n"), 3*MaxMatches), 0o644)
	if got := find(t, f, "x"); len(got) != MaxMatches {
		t.Fatalf("%d matches", len(got))
	}
}

func TestReplaceStreams(t *testing.T) {
	for i, c := range []struct{ text, old, new string }{
		{"one needle two needle", "needle", "pin"},
		{strings.Repeat("ab", 100000), "ba", "XYZ"},
		{strings.Repeat("a", 200000), "aaa", ""},
		{"no match here", "needle", "pin"},
	} {
		f, dir := files(t)
		p := filepath.Join(dir, "f")
		os.WriteFile(p, []byte(c.text), 0o640)
		n, err := Replace(context.Background(), f, "f", c.old, c.new, 1<<30)
		b, _ := os.ReadFile(p)
		want := strings.ReplaceAll(c.text, c.old, c.new)
		if err != nil || string(b) != want || n != strings.Count(c.text, c.old) {
			t.Fatalf("case %d: %d %v, %d bytes, want %d", i, n, err, len(b), len(want))
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
			t.Fatalf("case %d: mode %v", i, fi.Mode())
		}
	}
	// Random text and patterns against strings.ReplaceAll.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		text := make([]byte, r.IntN(200000))
		for j := range text {
			text[j] = "ab\n"[r.IntN(3)]
		}
		old := string(text[r.IntN(len(text)+1)/2:][:min(len(text)/2, 1+r.IntN(4))])
		if old == "" {
			continue
		}
		f, dir := files(t)
		os.WriteFile(filepath.Join(dir, "f"), text, 0o644)
		if _, err := Replace(context.Background(), f, "f", old, "Q", 1<<30); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != strings.ReplaceAll(string(text), old, "Q") {
			t.Fatalf("random case %d differs", i)
		}
	}
}

// An 8 MiB file and a 1 MiB value would make terabytes: refused before
// anything is written or allocated, the file untouched.
func TestReplaceBomb(t *testing.T) {
	f, dir := files(t)
	p := filepath.Join(dir, "f")
	orig := bytes.Repeat([]byte("a"), 8<<20)
	os.WriteFile(p, orig, 0o644)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Replace(context.Background(), f, "f", "a", strings.Repeat("b", 1<<20), 1<<30)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("the refused replace allocated %d bytes", alloc)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, orig) {
		t.Fatal("the file changed")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	// Under the bound, the same 1 MiB file × 200 bytes is written.
	os.WriteFile(p, bytes.Repeat([]byte("a"), 1000), 0o644)
	if _, err := Replace(context.Background(), f, "f", "a", strings.Repeat("b", 200), 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := Replace(context.Background(), f, "f", "b", strings.Repeat("c", 200), 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("200 KB × 200 under a 1 MiB bound: %v", err)
	}
}

// A batch writes its files all or none: nothing shows before Commit, a
// replaced file keeps its mode, and Abort (or a move that fails) leaves
// no staged file behind.
func TestBatchAllOrNone(t *testing.T) {
	ctx := context.Background()
	f, dir := files(t)
	os.WriteFile(filepath.Join(dir, "old"), []byte("before"), 0o600)
	b := NewBatch(f)
	for _, name := range []string{"a", "old", "d/e"} {
		if name == "d/e" {
			os.Mkdir(filepath.Join(dir, "d"), 0o755)
		}
		if err := b.Stage(ctx, name, strings.NewReader("new "+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil || b.Len() != 3 {
		t.Fatalf("a staged file shows before the commit (%d staged)", b.Len())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "old")); string(got) != "before" {
		t.Fatalf("old changed before the commit: %q", got)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "new a", "old": "new old", "d/e": "new d/e"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s: %q", name, got)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "old")); fi.Mode().Perm() != 0o600 {
		t.Errorf("the replaced file's mode is %v", fi.Mode().Perm())
	}

	aborted := NewBatch(f)
	aborted.Stage(ctx, "x", strings.NewReader("x"), 0o644)
	aborted.Abort(ctx)
	// A move that cannot be done: the target is a directory that is not
	// empty. What came before it stays; what is left staged is removed.
	os.MkdirAll(filepath.Join(dir, "full", "inside"), 0o755)
	failing := NewBatch(f)
	failing.Stage(ctx, "first", strings.NewReader("1"), 0o644)
	failing.Stage(ctx, "full", strings.NewReader("2"), 0o644)
	failing.Stage(ctx, "third", strings.NewReader("3"), 0o644)
	if err := failing.Commit(ctx); err == nil {
		t.Fatal("a move onto a full directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "first")); err != nil {
		t.Errorf("the file moved before the failure is gone: %v", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "d")} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".acp-bulk-") {
				t.Errorf("%s left staged in %s", e.Name(), d)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("an aborted file was written")
	}
}

// With Parents, a batch makes the directories its files need, keeps them
// once committed, and removes them again when aborted; a parent that is
// a file is refused and nothing is made.
func TestBatchParents(t *testing.T) {
	ctx := context.Background()
	f, dir := files(t)
	b := NewBatch(f)
	b.Parents = true
	if err := b.Stage(ctx, "n/a/b/f", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "n/a/b")); err != nil || !fi.IsDir() {
		t.Fatalf("the parents were not made: %v", err)
	}
	b.Abort(ctx)
	if _, err := os.Stat(filepath.Join(dir, "n")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an aborted batch left its directories: %v", err)
	}
	b = NewBatch(f)
	b.Parents = true
	b.Stage(ctx, "k/f", strings.NewReader("kept"), 0o644)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.Abort(ctx) // after a commit: nothing to undo
	if got, _ := os.ReadFile(filepath.Join(dir, "k/f")); string(got) != "kept" {
		t.Fatalf("k/f: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644)
	b = NewBatch(f)
	b.Parents = true
	if err := b.Stage(ctx, "plain/sub/f", strings.NewReader("x"), 0o644); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("a parent that is a file: %v", err)
	}
}

// A batch writes through links that stay in the workspace (a relative
// one, an absolute one as the workload names it, a dangling one whose
// target it makes), and refuses one that leads out, writing nothing
// there.
func TestBatchThroughLinks(t *testing.T) {
	ctx := context.Background()
	f, dir := files(t)
	outside := t.TempDir()
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.WriteFile(filepath.Join(dir, "real", "sibling.txt"), []byte("old"), 0o640)
	os.Symlink("sibling.txt", filepath.Join(dir, "real", "rel-link"))
	os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "abs-dir-link"))
	os.Symlink("real/not-yet.txt", filepath.Join(dir, "dangling"))
	os.Symlink(filepath.Join(outside, "x"), filepath.Join(dir, "out-abs"))
	os.Symlink("../../escape", filepath.Join(dir, "real", "out-rel"))
	b := NewBatch(f)
	b.Parents = true
	for name, content := range map[string]string{"real/rel-link": "through a relative link", "abs-dir-link/new.txt": "through a directory link", "dangling": "made at the target"} {
		if err := b.Stage(ctx, name, strings.NewReader(content), 0o644); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"real/sibling.txt": "through a relative link", "real/new.txt": "through a directory link", "real/not-yet.txt": "made at the target"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "real", "rel-link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link itself was replaced: %v %v", fi, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "real", "sibling.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("the target's mode is %v", fi.Mode().Perm())
	}
	for _, name := range []string{"out-abs", "real/out-rel"} {
		if err := NewBatch(f).Stage(ctx, name, strings.NewReader("x"), 0o644); !errors.Is(err, sruntime.ErrOutside) {
			t.Errorf("%s: %v, want ErrOutside", name, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was written outside: %v", entries)
	}
}
