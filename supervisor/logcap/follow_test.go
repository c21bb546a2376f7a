package logcap

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClipStartKeepsCharacters(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	for n := 0; n <= 21; n++ {
		out := ClipStart(s, n)
		if !utf8.ValidString(out) || len(out) > n {
			t.Fatalf("ClipStart(%d) = %q", n, out)
		}
	}
}

func TestClipStartBeginsAtALine(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"one\ntwo\nthree\n", 100, "one\ntwo\nthree\n"},
		{"one\ntwo\nthree\n", 9, "three\n"},       // "o\nthree\n" would start mid-line
		{"one\ntwo\nthree\n", 10, "two\nthree\n"}, // starts at a line already
		{"abcdefgh", 3, "fgh"},                    // no line break: a character boundary
		{"é€x", 3, "x"},
	} {
		if got := ClipStart(c.s, c.n); got != c.want {
			t.Errorf("ClipStart(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

// TestWatchWakesEarlierWaiters: a follower can wait on a log before the
// cap watches it (the watch is made off the create's path). What was
// written before the watch made no event, so Watch itself wakes the
// waiter, which then reads it.
func TestWatchWakesEarlierWaiters(t *testing.T) {
	root := t.TempDir()
	lc := newCap(t, root, 1<<20)
	rel := "s/" + Stdout
	written := lc.Wait(rel)
	appendTo(t, root, rel, "before the watch\n")
	lc.Watch("s")
	select {
	case <-written:
	case <-time.After(30 * time.Second):
		t.Fatal("a write before the watch never woke the follower waiting from before it")
	}
}

// A drain passes whole lines however the log's bytes fall into its
// reads: a long log is not cut mid-line at each read's end (it was, at
// every 64 KiB, until the bound on a held line counted only the line).
// Only a line longer than MaxFollowLine comes in pieces.
func TestDrainPassesWholeLines(t *testing.T) {
	root := t.TempDir()
	lc := newCap(t, root, 64<<20)
	rel := "s/" + Stdout
	line := strings.Repeat("x", 99) + "\n"
	appendTo(t, root, rel, strings.Repeat(line, 5000)+strings.Repeat("y", 3*MaxFollowLine)+"\n")
	f, err := lc.Oldest(rel)
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	atEnd, err := f.DrainAtMost(lc, true, 0, func(_, text string, _ int64) error {
		for _, l := range SplitLines([]byte(text), 0) {
			pieces = append(pieces, l.Text)
		}
		return nil
	})
	if err != nil || !atEnd {
		t.Fatal(atEnd, err)
	}
	for i, p := range pieces[:5000] {
		if p != line {
			t.Fatalf("line %d is %d bytes: %.40q", i, len(p), p)
		}
	}
	if rest := strings.Join(pieces[5000:], ""); rest != strings.Repeat("y", 3*MaxFollowLine)+"\n" || len(pieces) == 5001 {
		t.Errorf("the long line came as %d pieces, %d bytes", len(pieces)-5000, len(rest))
	}
}

// DrainAtMost stops once it has read its bound, and says it has more.
func TestDrainAtMostStops(t *testing.T) {
	root := t.TempDir()
	lc := newCap(t, root, 64<<20)
	rel := "s/" + Stdout
	appendTo(t, root, rel, strings.Repeat(strings.Repeat("x", 99)+"\n", 5000))
	f, _ := lc.Oldest(rel)
	n := 0
	count := func(_, text string, _ int64) error { n += len(text); return nil }
	if atEnd, err := f.DrainAtMost(lc, true, 100<<10, count); err != nil || atEnd || n < 64<<10 || n > 200<<10 {
		t.Fatalf("first pass: at end %v, %d bytes, %v", atEnd, n, err)
	}
	for atEnd := false; !atEnd; {
		var err error
		if atEnd, err = f.DrainAtMost(lc, true, 100<<10, count); err != nil {
			t.Fatal(err)
		}
	}
	if n != 500000 {
		t.Errorf("all passes: %d bytes, want 500000", n)
	}
}
