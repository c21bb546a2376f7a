package logcap

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Tail reads the end of log rel across its rotation: the last tail
// bytes plus a margin so that redaction sees a secret whole even where the
// window starts, taken from the live file and, where that is shorter, the
// end of the rotated one before it. A window that does not start at the
// log's start drops its first, partial line.
//
// The files are opened as the daemon's own: a link or a FIFO planted in
// their place is refused at once, never followed or waited on.
func (lc *Cap) Tail(rel string, tail int) (string, error) {
	window := int64(tail) + 64<<10
	b, off, err := lc.readEnd(rel, window)
	if err != nil {
		return "", err
	}
	if off == 0 && int64(len(b)) < window {
		older, olderOff, err := lc.readEnd(rel+RotatedSuffix, window-int64(len(b)))
		if err != nil {
			return "", err
		}
		b, off = append(older, b...), olderOff
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// readEnd returns the last n bytes of file rel (none if it does not
// exist) and how many bytes of the file's data come before them.
func (lc *Cap) readEnd(rel string, n int64) ([]byte, int64, error) {
	f, fi, err := lc.fs.OpenRegular(rel, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	// A log whose head was punched out starts where its data does.
	ds := dataStart(f, fi.Size())
	off := max(fi.Size()-n, ds)
	b := make([]byte, fi.Size()-off)
	k, err := f.ReadAt(b, off)
	if err != nil && err != io.EOF {
		return nil, 0, err
	}
	return b[:k], off - ds, nil
}

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
// lines; with final, the line not yet ended too.
func (f *Follower) Drain(lc *Cap, final bool, send func(stream, text string) error) error {
	for {
		b, next, skipped, err := lc.ReadFrom(f.Rel, f.Pos, 64<<10)
		if err != nil {
			return err
		}
		f.Pos = next
		end := len(b) == 0 // all read, for now
		if skipped {
			// Rotated away before it was read: say so, and go on from a
			// line's start.
			f.partial, f.SkipLine = nil, true
			if err := send(f.Name, "[… older output rotated away before it could be followed …]\n"); err != nil {
				return err
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
		if final && end || len(f.partial) >= MaxFollowLine {
			cut = len(f.partial)
		}
		if cut > 0 {
			if err := send(f.Name, string(f.partial[:cut])); err != nil {
				return err
			}
			f.partial = append(f.partial[:0], f.partial[cut:]...)
		}
		if end {
			return nil
		}
	}
}
