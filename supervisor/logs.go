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
	b, err := s.fs.readFile(e.id+"/"+EnvFile, maxEnvBytes)
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
	f, fi, err := s.fs.openRegular(rel)
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
// the rest of a line that grew past FollowChunk.
type LogChunk struct {
	Stream string // "stdout" or "stderr"
	Text   string // redacted
}

// FollowChunk bounds one LogChunk's text: escaped as a JSON string (six
// bytes for a control byte at worst) it stays one SSE line within the
// API's 16 KiB bound.
const FollowChunk = 2 << 10

// FollowLogs passes emit the last tail bytes of the sandbox's stdout and
// stderr (from a line's start) and then what they gain, redacted with the
// secret values of its environment, until the sandbox is no longer
// running (after its last output), ctx ends or emit fails. It follows the
// logs across rotation. It returns the sandbox as it was when the
// following ended.
//
// What a follower holds is bounded: one partial line per stream of at
// most FollowChunk bytes; a longer line is passed on in pieces.
func (s *Supervisor) FollowLogs(ctx context.Context, id string, tail int, emit func(LogChunk) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	if tail <= 0 {
		tail = DefaultLogTail
	}
	// Told of every change of state, so that following ends at a stop
	// (the workload writes no more then, and nothing wakes the log).
	sub, _ := s.Subscribe(nil, nil)
	defer func() { sub.Close() }()
	r := redact.New(s.secretsOf(e))
	type stream struct {
		name, rel string
		pos       int64
		partial   []byte // the start of a line not yet ended
		skipLine  bool   // drop up to the first newline: the tail began mid-line
	}
	streams := []*stream{{name: "stdout", rel: e.id + "/" + StdoutFile}, {name: "stderr", rel: e.id + "/" + StderrFile}}
	for _, st := range streams {
		if st.pos, st.skipLine, err = s.logs.tailFrom(st.rel, int64(tail)); err != nil {
			return Sandbox{}, err
		}
	}
	send := func(st *stream, text []byte) error {
		red, err := r.RedactContext(ctx, strings.ToValidUTF8(string(text), "\uFFFD"))
		if err != nil {
			return err
		}
		return emit(LogChunk{Stream: st.name, Text: red})
	}
	// drain passes on what st gained; at the end, its last partial line
	// too.
	drain := func(st *stream, final bool) error {
		for {
			b, next, skipped, err := s.logs.readFrom(st.rel, st.pos, 64<<10)
			if err != nil {
				return err
			}
			st.pos = next
			if skipped {
				// Rotated away before it was read: say so, and go on
				// from a line's start.
				st.partial, st.skipLine = nil, true
				if err := send(st, []byte("[… older output rotated away before it could be followed …]\n")); err != nil {
					return err
				}
			}
			if st.skipLine {
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					b = nil
				} else {
					b, st.skipLine = b[i+1:], false
				}
			}
			st.partial = append(st.partial, b...)
			for len(st.partial) > 0 {
				cut := bytes.LastIndexByte(st.partial[:min(len(st.partial), FollowChunk)], '\n') + 1
				switch {
				case cut > 0:
				case len(st.partial) >= FollowChunk:
					// A long line goes on in pieces, never splitting a
					// character.
					cut = FollowChunk
					for c := cut; c > FollowChunk-utf8.UTFMax; c-- {
						if utf8.RuneStart(st.partial[c]) {
							cut = c
							break
						}
					}
				case final && len(b) == 0:
					cut = len(st.partial)
				default:
					break
				}
				if cut == 0 {
					break
				}
				if err := send(st, st.partial[:cut]); err != nil {
					return err
				}
				st.partial = st.partial[cut:]
			}
			if len(b) == 0 {
				return nil
			}
		}
	}
	for {
		// Waiters first, then the reads: a write after a read wakes us.
		wake := make([]<-chan struct{}, len(streams))
		for i, st := range streams {
			wake[i] = s.logs.wait(st.rel)
		}
		s.mu.Lock()
		sb, gone := e.info, s.sandboxes[id] != e
		s.mu.Unlock()
		live := sb.State.Live() && !gone
		for _, st := range streams {
			if err := drain(st, !live); err != nil {
				return sb, err
			}
		}
		if !live {
			return sb, nil
		}
	wait:
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-wake[0]:
		case <-wake[1]:
		case ev, ok := <-sub.C:
			switch {
			case !ok: // fell behind the daemon's events: catch up
				sub.Close()
				sub, _ = s.Subscribe(nil, nil)
			case ev.Type != EventSnapshot && ev.Sandbox.ID != id:
				goto wait // another sandbox's
			}
		}
	}
}
