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
