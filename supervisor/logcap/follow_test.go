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
