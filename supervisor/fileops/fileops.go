// Package fileops is the toolbox's work over many files of a sandbox:
// walking a tree, finding text in it, finding names in it, replacing text
// in files. Each operation is bounded before it starts, in memory and in
// what it reads, whatever the files hold: a file is read as a stream, a
// line is never held whole past MaxContent, a file reached by several hard
// links is read once, and a replacement's result is sized before anything
// is written.
package fileops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of the operations.
const (
	// MaxWalk is how many entries one walk looks at.
	MaxWalk = 10000
	// MaxMatches is how many matches (lines, or names) one find answers.
	MaxMatches = 1000
	// MaxContent is how much of a matching line a match carries; a longer
	// line is cut there (at a character's boundary) and ends in "…".
	MaxContent = 1024
	// MaxScanned is how many bytes one find reads in all, over every file.
	MaxScanned = 256 << 20
	// MaxPattern bounds a pattern (a block is read with this much more).
	MaxPattern = 64 << 10
)

// ErrTooLarge: a replacement's result would pass the bound it was given.
var ErrTooLarge = errors.New("the result would be too large")

// Walk visits the regular files beneath dir, breadth first, links not
// followed, at most MaxWalk entries; a file with several names is
// visited once. visit returns false to stop. Only an error reaching dir
// itself is returned; a directory beneath it that cannot be read is
// passed over.
func Walk(ctx context.Context, f runtime.Files, dir string, visit func(name string, fi runtime.FileInfo) bool) error {
	type id struct{ dev, ino uint64 }
	seenFiles := map[id]bool{}
	seen := 0
	queue := []string{dir}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := queue[0]
		queue = queue[1:]
		list, err := f.List(ctx, d)
		if err != nil {
			if d == dir {
				return err
			}
			continue
		}
		for _, fi := range list {
			if seen++; seen > MaxWalk {
				return nil
			}
			name := path.Join(d, fi.Name)
			switch {
			case fi.IsDir():
				queue = append(queue, name)
			case fi.Mode.IsRegular():
				if fi.Ino != 0 {
					k := id{fi.Dev, fi.Ino}
					if seenFiles[k] {
						continue
					}
					seenFiles[k] = true
				}
				if !visit(name, fi) {
					return nil
				}
			}
		}
	}
	return nil
}

// Match is a line of a file that holds the pattern.
type Match struct {
	File    string
	Line    int
	Content string // the line, at most MaxContent bytes of it ("…" after)
}

// Find passes emit each line beneath dir that holds pattern (text, not a
// regular expression), file by file, at most MaxMatches, reading at most
// MaxScanned bytes in all; a file whose first block holds a NUL byte is
// taken as binary and skipped. emit returning an error stops the find
// with it.
func Find(ctx context.Context, f runtime.Files, dir, pattern string, emit func(Match) error) error {
	if pattern == "" || len(pattern) > MaxPattern {
		return fmt.Errorf("%w: the pattern must be 1 to %d bytes", fs.ErrInvalid, MaxPattern)
	}
	matches := 0
	var budget int64 = MaxScanned
	var stop error
	err := Walk(ctx, f, dir, func(name string, _ runtime.FileInfo) bool {
		rc, _, err := f.Open(ctx, name)
		if err != nil {
			return true
		}
		defer rc.Close()
		lr := &io.LimitedReader{R: rc, N: budget}
		err = scanLines(lr, []byte(pattern), func(line int, content string) error {
			matches++
			if err := emit(Match{File: name, Line: line, Content: content}); err != nil {
				return err
			}
			if matches >= MaxMatches {
				return errEnough
			}
			return nil
		})
		budget = lr.N
		switch {
		case errors.Is(err, errEnough):
			return false
		case err != nil && !errors.Is(err, errBinary):
			if ctx.Err() != nil || !isReadError(err) {
				stop = err
				return false
			}
		}
		return budget > 0
	})
	if stop != nil {
		return stop
	}
	return err
}

var (
	errEnough = errors.New("enough matches")
	errBinary = errors.New("a binary file")
)

// readError marks an error of the file being read, which only skips it.
type readError struct{ error }

func (e readError) Unwrap() error { return e.error }

func isReadError(err error) bool {
	var re readError
	return errors.As(err, &re)
}

// scanLines reads r line by line, never holding more than a block and
// MaxContent bytes of a line, and passes match each line holding pat.
func scanLines(r io.Reader, pat []byte, match func(line int, content string) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, _ := br.Peek(64 << 10); bytes.IndexByte(b, 0) >= 0 { // the first block, not only its first line
		return errBinary
	}
	// The window carries the last len(pat)-1 bytes of the line read so
	// far, so that a pattern across two blocks is found.
	var head []byte   // the line's first MaxContent bytes
	var window []byte // the line's tail, to find the pattern across blocks
	line, found, cut := 1, false, false
	for {
		chunk, err := br.ReadSlice('\n')
		end := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		body := chunk
		if end {
			body = chunk[:len(chunk)-1]
		}
		if len(head) < MaxContent {
			n := min(MaxContent-len(head), len(body))
			head = append(head, body[:n]...)
			cut = cut || n < len(body)
		} else if len(body) > 0 {
			cut = true
		}
		if !found {
			window = append(window, body...)
			if bytes.Contains(window, pat) {
				found = true
			}
			if keep := len(pat) - 1; len(window) > keep {
				window = append(window[:0], window[len(window)-keep:]...)
			}
		}
		last := err != nil && !errors.Is(err, bufio.ErrBufferFull) // the text ends without a line break
		if end || last && (len(head) > 0 || found) {
			if found {
				if err := match(line, content(head, cut)); err != nil {
					return err
				}
			}
			line++
			head, window, found, cut = head[:0], window[:0], false, false
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return readError{err}
		}
	}
}

// content is a matching line as a match carries it: valid UTF-8 where
// the line was, cut at a character's boundary.
func content(head []byte, cut bool) string {
	if !cut {
		return string(head)
	}
	for len(head) > 0 && !utf8.Valid(head) && len(head) > MaxContent-utf8.UTFMax {
		head = head[:len(head)-1]
	}
	return string(head) + "…"
}

// Search passes emit the name of each file beneath dir whose last element
// matches glob (path.Match), at most MaxMatches.
func Search(ctx context.Context, f runtime.Files, dir, glob string, emit func(name string) error) error {
	if _, err := path.Match(glob, ""); err != nil {
		return fmt.Errorf("%w: pattern: %w", fs.ErrInvalid, err)
	}
	n := 0
	var stop error
	err := Walk(ctx, f, dir, func(name string, fi runtime.FileInfo) bool {
		if ok, _ := path.Match(glob, fi.Name); !ok {
			return true
		}
		if stop = emit(name); stop != nil {
			return false
		}
		n++
		return n < MaxMatches
	})
	if stop != nil {
		return stop
	}
	return err
}

// Replace replaces every pattern in file name with value, as a stream:
// it first counts what the result would be and refuses one past max bytes
// (an error wrapping ErrTooLarge) before writing anything, then writes
// the result in place atomically (Files.Write), the file's mode kept. A
// file that does not hold the pattern is left as it is. It returns how
// many occurrences were replaced.
func Replace(ctx context.Context, f runtime.Files, name, pattern, value string, max int64) (int, error) {
	if pattern == "" || len(pattern) > MaxPattern {
		return 0, fmt.Errorf("%w: the pattern must be 1 to %d bytes", fs.ErrInvalid, MaxPattern)
	}
	pat, val := []byte(pattern), []byte(value)
	rc, fi, err := f.Open(ctx, name)
	if err != nil {
		return 0, err
	}
	_, count, err := replaceStream(&limitWriter{max: max}, rc, pat, val)
	rc.Close()
	if err != nil || count == 0 {
		return 0, tooLarge(err, max)
	}
	if rc, _, err = f.Open(ctx, name); err != nil {
		return 0, err
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	replaced := make(chan int, 1)
	go func() {
		// The file may have grown since it was counted: the bound holds
		// while it is written too.
		_, n, err := replaceStream(&limitWriter{w: pw, max: max}, rc, pat, val)
		pw.CloseWithError(err)
		replaced <- n
	}()
	_, err = f.Write(ctx, name, pr, fi.Mode.Perm())
	pr.CloseWithError(errors.New("the write has ended")) // a write that stopped early ends the copy
	count = <-replaced
	if err != nil {
		return 0, tooLarge(err, max)
	}
	return count, nil
}

func tooLarge(err error, max int64) error {
	if errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w: the file would pass %d bytes", ErrTooLarge, max)
	}
	return err
}

// replaceStream copies src to dst with every old replaced by new, holding
// a block and len(old) bytes, and returns the bytes written and the
// occurrences replaced.
func replaceStream(dst io.Writer, src io.Reader, old, new []byte) (written int64, count int, err error) {
	const block = 64 << 10
	base := make([]byte, block+len(old))
	write := func(b []byte) error {
		n, err := dst.Write(b)
		written += int64(n)
		return err
	}
	filled := 0 // base[:filled] is read and not yet written
	for eof := false; !eof; {
		n, err := io.ReadFull(src, base[filled:])
		filled += n
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			eof = true
		default:
			return written, count, err
		}
		data := base[:filled]
		for {
			i := bytes.Index(data, old)
			if i < 0 {
				break
			}
			if err := write(data[:i]); err != nil {
				return written, count, err
			}
			if err := write(new); err != nil {
				return written, count, err
			}
			count++
			data = data[i+len(old):]
		}
		// Keep what may begin an occurrence that the next block ends.
		keep := min(len(old)-1, len(data))
		if eof {
			keep = 0
		}
		if err := write(data[:len(data)-keep]); err != nil {
			return written, count, err
		}
		filled = copy(base, data[len(data)-keep:])
	}
	return written, count, nil
}

// limitWriter passes what it is given to w (nothing, if w is nil) and
// fails with ErrTooLarge past max bytes.
type limitWriter struct {
	w   io.Writer
	n   int64
	max int64
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.n+int64(len(b)) > l.max {
		return 0, ErrTooLarge
	}
	l.n += int64(len(b))
	if l.w == nil {
		return len(b), nil
	}
	return l.w.Write(b)
}
