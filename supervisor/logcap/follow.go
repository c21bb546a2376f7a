package logcap

import (
	"bytes"
	"errors"
	"math"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// ClipStart keeps at most the last n bytes of s, starting at a line: the
// partial first line of the window is dropped (unless the window holds no
// line break at all, then at a character boundary).
func ClipStart(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	if s[i-1] != '\n' {
		if j := strings.IndexByte(s[i:], '\n'); j >= 0 && i+j+1 < len(s) {
			return s[i+j+1:]
		}
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// MaxFollowLine bounds the start of a line a follower holds while it
// waits for the line's end; a longer one is passed on as it is.
const MaxFollowLine = 64 << 10

// Follower follows one stream of a sandbox's log.
type Follower struct {
	Name, Rel string
	Pos       int64  // a position of the log cap's: rotation does not move it
	partial   []byte // the start of a line not yet ended
	SkipLine  bool   // drop up to the first newline: reading began mid-line
}

// Drain passes send what f's log gained since the last drain, in whole
// lines, with the position their text ends at; with final, the line not
// yet ended too.
func (f *Follower) Drain(lc *Cap, final bool, send func(stream, text string, end int64) error) error {
	_, err := f.DrainAtMost(lc, final, 0, send)
	return err
}

// DrainAtMost is Drain that stops once it has read at least max bytes (0:
// no bound), and says whether it read all there was.
func (f *Follower) DrainAtMost(lc *Cap, final bool, max int64, send func(stream, text string, end int64) error) (atEnd bool, err error) {
	for read := int64(0); max == 0 || read < max; {
		b, next, skipped, err := lc.ReadFrom(f.Rel, f.Pos, 64<<10)
		if err != nil {
			return false, err
		}
		f.Pos, read = next, read+int64(len(b))
		end := len(b) == 0 // all read, for now
		if skipped {
			// Rotated away before it was read: say so, and go on from a
			// line's start.
			f.partial, f.SkipLine = nil, true
			if err := send(f.Name, "[… older output rotated away before it could be followed …]\n", next-int64(len(b))); err != nil {
				return false, err
			}
		}
		if f.SkipLine {
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				b, f.SkipLine = b[i+1:], false
			} else {
				b = nil // all of it is the cut line
			}
		}
		f.partial = append(f.partial, b...)
		cut := bytes.LastIndexByte(f.partial, '\n') + 1
		if final && end || len(f.partial)-cut >= MaxFollowLine {
			cut = len(f.partial)
		}
		if cut > 0 {
			if err := send(f.Name, string(f.partial[:cut]), f.Pos-int64(len(f.partial)-cut)); err != nil {
				return false, err
			}
			f.partial = append(f.partial[:0], f.partial[cut:]...)
		}
		if end {
			return true, nil
		}
	}
	return false, nil
}

// Oldest is where a reader of everything log rel keeps starts: its oldest
// byte kept, and whether that is mid-line (older output rotated away).
func (lc *Cap) Oldest(rel string) (Follower, error) {
	pos, mid, err := lc.TailFrom(rel, math.MaxInt64)
	return Follower{Rel: rel, Pos: pos, SkipLine: mid}, err
}

// Lines reads log rel in whole, dated lines: its last tail bytes or, when
// since is set and later, what was written from since on; reading starts
// a line before that, so that a caller redacting the text sees a secret
// whole where the window starts (margin bytes are read before it), and
// drops what it does not want.
// It returns the position after what it read, for a follower to go on
// from.
func (lc *Cap) Lines(rel string, tail, margin int64, since time.Time) ([]Line, int64, error) {
	pos, mid, err := lc.TailFrom(rel, tail+margin)
	if err != nil {
		return nil, 0, err
	}
	if !since.IsZero() {
		if sp := lc.SinceFrom(rel, since); sp-margin-1 > pos {
			pos, mid = sp-margin-1, true // from the byte before, as TailFrom
		}
	}
	f := Follower{Rel: rel, Pos: pos, SkipLine: mid}
	var lines []Line
	err = f.Drain(lc, true, func(_, text string, end int64) error {
		lines = append(lines, SplitLines([]byte(text), end-int64(len(text)))...)
		return nil
	})
	lc.Date(rel, lines)
	return lines, f.Pos, err
}

// Size says how much of log rel is on disk, in its live file (the data
// after a punched head) and in its rotated one, and where it ends: every
// byte written to it, what rotation dropped included.
func (lc *Cap) Size(rel string) (live, rotated, written int64, err error) {
	mu := lc.rotatingOf(rel)
	mu.RLock()
	defer mu.RUnlock()
	st := lc.state(rel)
	f, fi, err := lc.fs.OpenRegular(rel, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, st.shift, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	if k := st.kept; k.to > k.from {
		if rfi, err := lc.fs.Lstat(rel + RotatedSuffix); err == nil {
			rotated = rfi.Size()
		}
	}
	return fi.Size() - dataStart(f, fi.Size()), rotated, fi.Size() + st.shift, nil
}
