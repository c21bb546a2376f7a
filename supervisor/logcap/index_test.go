package logcap

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
)

// newCap starts a cap over a fresh root holding sandbox "s" with its two
// logs, capped at max bytes each.
func newCap(t *testing.T, root string, max int64) *Cap {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "s"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range Files {
		fd, err := os.OpenFile(filepath.Join(root, "s", f), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		fd.Close()
	}
	dir, err := securefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	lc, err := New(dir, func(name string) string { n++; return fmt.Sprintf(".%s.tmp-%d", name, n) }, max, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close(); dir.Close() })
	return lc
}

// seen waits until the cap has dated every byte of log rel.
func seen(t *testing.T, lc *Cap, root, rel string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		fi, err := os.Stat(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		mu := lc.rotatingOf(rel)
		mu.RLock()
		st := lc.state(rel)
		done := st.last.pos >= fi.Size()+st.shift && len(st.pending) == 0
		mu.RUnlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: its writes were never dated", rel)
		}
		time.Sleep(time.Millisecond) // the cap's event loop runs apart
	}
}

func appendTo(t *testing.T, root, rel, text string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// Two streams written in turn merge back in the order they were written,
// each line dated, and a since picks the later ones.
func TestLinesMergeInWriteOrder(t *testing.T) {
	root := t.TempDir()
	lc := newCap(t, root, 1<<20)
	lc.Watch("s")
	rels := [2]string{"s/" + Stdout, "s/" + Stderr}
	var mid time.Time
	for i := range 20 {
		rel := rels[i%3%2] // out err out out err out …
		appendTo(t, root, rel, fmt.Sprintf("line %02d\n", i))
		seen(t, lc, root, rel)
		if i == 10 {
			mid = time.Now()
		}
	}
	read := func(since time.Time) []Line {
		var all [2][]Line
		for i, rel := range rels {
			lines, _, err := lc.Lines(rel, 1<<20, 0, since)
			if err != nil {
				t.Fatal(err)
			}
			all[i] = lines
		}
		return Merge(all[0], all[1], func(l Line) time.Time { return l.At })
	}
	lines := read(time.Time{})
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20: %+v", len(lines), lines)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("line %02d\n", i); l.Text != want {
			t.Fatalf("merged line %d is %q, want %q (all: %+v)", i, l.Text, want, lines)
		}
	}
	later := read(mid)
	if len(later) != 9 || later[0].Text != "line 11\n" {
		t.Fatalf("since the 11th write: %+v", later)
	}
}

// A restarted daemon (a new cap over the same files) dates the lines as
// the one before it did, across a rotation that moved their offsets.
func TestIndexSurvivesRestartAndRotation(t *testing.T) {
	root := t.TempDir()
	const max = 64 << 10
	lc := newCap(t, root, max)
	lc.Watch("s")
	rel := "s/" + Stdout
	for i := range 60 {
		appendTo(t, root, rel, fmt.Sprintf("%04d %01000d\n", i, 0)) // about 1 KiB a line: 60 KiB, rotated once
		seen(t, lc, root, rel)
	}
	if _, err := os.Stat(filepath.Join(root, rel+RotatedSuffix)); err != nil {
		t.Fatalf("not rotated: %v", err)
	}
	before, _, err := lc.Lines(rel, max, 0, time.Time{})
	if err != nil || len(before) < 40 {
		t.Fatalf("%d lines before the restart: %v", len(before), err)
	}
	lc.Close()

	again := newCap(t, root, max)
	after, _, err := again.Lines(rel, max, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("%d lines after the restart, %d before", len(after), len(before))
	}
	for i := range after {
		if after[i].Text != before[i].Text || !after[i].At.Equal(before[i].At) || after[i].End != before[i].End {
			t.Fatalf("line %d: %q at %v (end %d), before %q at %v (end %d)", i, after[i].Text[:4], after[i].At, after[i].End, before[i].Text[:4], before[i].At, before[i].End)
		}
	}
}

// An index is bounded however many tiny writes it dates: it thins its
// older half, and the newest writes keep their exact times.
func TestIndexBounded(t *testing.T) {
	root := t.TempDir()
	const max = 1 << 20 // records: 32 KiB / 16 = 2048
	lc := newCap(t, root, max)
	rel := "s/" + Stderr
	var last time.Time
	for i := range 10000 {
		appendTo(t, root, rel, fmt.Sprintf("%d\n", i%10))
		lc.rotate(rel, true) // as the event loop would, one event a write
		lc.flush(rel)
		last = time.Now()
	}
	fi, err := os.Stat(filepath.Join(root, rel+IndexSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if bound := int64(headerSize) + lc.maxRecords()*recordSize; fi.Size() > bound {
		t.Fatalf("index of %d bytes, bound %d", fi.Size(), bound)
	}
	lines, _, err := lc.Lines(rel, max, 0, time.Time{})
	if err != nil || len(lines) != 10000 {
		t.Fatalf("%d lines: %v", len(lines), err)
	}
	for i := 1; i < len(lines); i++ {
		if lines[i].At.Before(lines[i-1].At) {
			t.Fatalf("line %d dated before the one before it", i)
		}
	}
	if newest := lines[len(lines)-1].At; newest.After(last) || last.Sub(newest) > time.Second {
		t.Fatalf("the newest line dated %v, written by %v", newest, last)
	}
	if lines[len(lines)-2].At.Equal(lines[len(lines)-1].At) {
		t.Fatal("the two newest lines share a time: the newest records were thinned")
	}
}
