package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/redact"
	"golang.org/x/sys/unix"
)

// Logs are a sandbox's entrypoint logs, redacted.
type Logs struct {
	Stdout string
	Stderr string
}

// DefaultLogTail is how much of each log EntrypointLogs returns.
const DefaultLogTail = 64 << 10

// EntrypointLogs returns the last tail bytes of the sandbox's stdout and
// stderr, redacted with the secret values of its own environment.
//
// Redaction is linear in the text and stops when ctx ends (the caller has
// gone), returning ctx's error.
func (s *Supervisor) EntrypointLogs(ctx context.Context, id string, tail int) (Logs, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Logs{}, err
	}
	if tail <= 0 {
		tail = DefaultLogTail
	}
	r := redact.New(s.secretsOf(e))
	var out Logs
	for _, f := range []struct {
		name string
		dst  *string
	}{{StdoutFile, &out.Stdout}, {StderrFile, &out.Stderr}} {
		text, err := s.readTail(e.id+"/"+f.name, tail)
		if err != nil {
			return Logs{}, err
		}
		red, err := r.RedactContext(ctx, text)
		if err != nil {
			return Logs{}, err
		}
		*f.dst = clipStart(red, tail)
	}
	return out, nil
}

// secretsOf returns the values of e's env whose keys look secret, plus
// every forwarded credential.
func (s *Supervisor) secretsOf(e *sandbox) []string {
	out := s.opts.Env.Secrets()
	b, err := s.fs.ReadFile(e.id+"/"+EnvFile, maxEnvBytes)
	if err != nil {
		s.log.Warn("read sandbox environment for redaction", "sandbox", e.id, "err", err)
		return out
	}
	var env map[string]string
	if json.Unmarshal(b, &env) != nil {
		return out
	}
	for k, v := range env {
		if redact.SecretKey(k) {
			out = append(out, v)
		}
	}
	return out
}

// readTail reads the end of a log across its rotation: the last tail
// bytes plus a margin so that redaction sees a secret whole even where the
// window starts, taken from the live file and, where that is shorter, the
// end of the rotated one before it. A window that does not start at the
// log's start drops its first, partial line.
//
// The files are opened as the daemon's own: a link or a FIFO planted in
// their place is refused at once, never followed or waited on.
func (s *Supervisor) readTail(rel string, tail int) (string, error) {
	window := int64(tail) + 64<<10
	b, off, err := s.readEnd(rel, window)
	if err != nil {
		return "", err
	}
	if off == 0 && int64(len(b)) < window {
		older, olderOff, err := s.readEnd(rel+RotatedSuffix, window-int64(len(b)))
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
func (s *Supervisor) readEnd(rel string, n int64) ([]byte, int64, error) {
	f, fi, err := s.fs.OpenRegular(rel, unix.O_RDONLY)
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

// clipStart keeps at most the last n bytes of s, starting at a line: the
// partial first line of the window is dropped (unless the window holds no
// line break at all, then at a character boundary).
func clipStart(s string, n int) string {
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

// LogChunk is a piece of a followed log: whole lines of one stream, or
// pieces of them, redacted.
type LogChunk struct {
	Stream string // "stdout" or "stderr"
	Text   string
}

// FollowChunk bounds one LogChunk's text: escaped as a JSON string (six
// bytes for a control byte at worst) it stays one SSE line within the
// API's 16 KiB bound.
const FollowChunk = 2 << 10

// maxFollowLine bounds the start of a line a follower holds while it
// waits for the line's end; a longer one is passed on as it is.
const maxFollowLine = 64 << 10

// FollowLogs passes emit the last tail bytes of the sandbox's stdout and
// stderr (from a line's start) and then what they gain, redacted with the
// secret values of its environment, until the sandbox is no longer
// running (after its last output), ctx ends or emit fails. It follows the
// logs across rotation. It returns the sandbox as it was when the
// following ended.
//
// Whole lines are redacted at once (a secret is never cut in two), then
// passed on in chunks of at most FollowChunk bytes. A follower holds at
// most maxFollowLine bytes of a line not yet ended per stream.
func (s *Supervisor) FollowLogs(ctx context.Context, id string, tail int, emit func(LogChunk) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	if tail <= 0 {
		tail = DefaultLogTail
	}
	r := redact.New(s.secretsOf(e))
	send := func(stream, text string) error {
		red, err := r.RedactContext(ctx, strings.ToValidUTF8(text, "\uFFFD"))
		if err != nil {
			return err
		}
		for red != "" {
			n := min(len(red), FollowChunk)
			for n < len(red) && !utf8.RuneStart(red[n]) {
				n--
			}
			if err := emit(LogChunk{Stream: stream, Text: red[:n]}); err != nil {
				return err
			}
			red = red[n:]
		}
		return nil
	}
	streams := []*logFollower{{name: "stdout", rel: e.id + "/" + StdoutFile}, {name: "stderr", rel: e.id + "/" + StderrFile}}
	for _, f := range streams {
		if f.pos, f.skipLine, err = s.logs.tailFrom(f.rel, int64(tail)); err != nil {
			return Sandbox{}, err
		}
	}
	for {
		// Waiters first, then the reads: a write or a change after
		// them wakes us. A stop is a change: nothing wakes a log then.
		written := [2]<-chan struct{}{s.logs.wait(streams[0].rel), s.logs.wait(streams[1].rel)}
		s.mu.Lock()
		sb, changed := e.info, e.changesLocked()
		live := sb.State.Live() && s.sandboxes[id] == e
		s.mu.Unlock()
		for _, f := range streams {
			if err := f.drain(s.logs, !live, send); err != nil {
				return sb, err
			}
		}
		if !live {
			return sb, nil
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-written[0]:
		case <-written[1]:
		case <-changed:
		}
	}
}

// logFollower follows one stream of a sandbox's log.
type logFollower struct {
	name, rel string
	pos       int64  // a position of the log cap's: rotation does not move it
	partial   []byte // the start of a line not yet ended
	skipLine  bool   // drop up to the first newline: reading began mid-line
}

// drain passes send what f's log gained since the last drain, in whole
// lines; with final, the line not yet ended too.
func (f *logFollower) drain(lc *logCap, final bool, send func(stream, text string) error) error {
	for {
		b, next, skipped, err := lc.readFrom(f.rel, f.pos, 64<<10)
		if err != nil {
			return err
		}
		f.pos = next
		end := len(b) == 0 // all read, for now
		if skipped {
			// Rotated away before it was read: say so, and go on from a
			// line's start.
			f.partial, f.skipLine = nil, true
			if err := send(f.name, "[… older output rotated away before it could be followed …]\n"); err != nil {
				return err
			}
		}
		if f.skipLine {
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				b, f.skipLine = b[i+1:], false
			} else {
				b = nil // all of it is the cut line
			}
		}
		f.partial = append(f.partial, b...)
		cut := bytes.LastIndexByte(f.partial, '\n') + 1
		if final && end || len(f.partial) >= maxFollowLine {
			cut = len(f.partial)
		}
		if cut > 0 {
			if err := send(f.name, string(f.partial[:cut])); err != nil {
				return err
			}
			f.partial = append(f.partial[:0], f.partial[cut:]...)
		}
		if end {
			return nil
		}
	}
}
