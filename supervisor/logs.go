package supervisor

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/redact"
)

// Logs are a sandbox's entrypoint logs, redacted.
type Logs struct {
	Stdout string
	Stderr string
	// Lines are both streams' lines in the order they were written.
	Lines []LogLine
}

// Output is both streams merged in the order they were written.
func (l Logs) Output() string {
	var b strings.Builder
	for _, line := range l.Lines {
		b.WriteString(line.Text)
	}
	return b.String()
}

// A LogLine is one line of a log (its newline kept; a last line not yet
// ended has none), redacted, and when it was written.
type LogLine struct {
	Stream string // "stdout" or "stderr"
	At     time.Time
	Text   string
}

// LogQuery picks which lines EntrypointLogs and FollowLogs return.
type LogQuery struct {
	TailBytes int       // of each stream, at most; 0: DefaultLogTail
	Lines     int       // the last this many lines of both; 0: all
	Since     time.Time // only lines written at or after it
	Stream    string    // "stdout" or "stderr" only; "": both
}

// The streams, as LogLine.Stream and LogQuery.Stream name them.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// DefaultLogTail is how much of each log EntrypointLogs returns.
const DefaultLogTail = 64 << 10

// redactMargin is how much of a log is read before the window asked for,
// so that redaction sees a secret whole where the window starts.
const redactMargin = 64 << 10

// stream is one log of a sandbox, as the queries see it.
type stream struct{ name, rel string }

func (q LogQuery) streams(id string) []stream {
	var out []stream
	for i, f := range logcap.Files {
		name := []string{StreamStdout, StreamStderr}[i]
		if q.Stream == "" || q.Stream == name {
			out = append(out, stream{name, id + "/" + f})
		}
	}
	return out
}

// EntrypointLogs returns the end of the sandbox's stdout and stderr as q
// picks it, redacted with the secret values of its own environment.
//
// Redaction is linear in the text and stops when ctx ends (the caller has
// gone), returning ctx's error.
func (s *Supervisor) EntrypointLogs(ctx context.Context, id string, q LogQuery) (Logs, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Logs{}, err
	}
	lines, _, err := s.backlog(ctx, e, redact.New(s.secretsOf(e)), q)
	if err != nil {
		return Logs{}, err
	}
	out := Logs{Lines: lines}
	var stdout, stderr strings.Builder
	for _, l := range lines {
		if l.Stream == StreamStdout {
			stdout.WriteString(l.Text)
		} else {
			stderr.WriteString(l.Text)
		}
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	return out, nil
}

// backlog reads the lines q picks of e's logs, redacted and merged, and
// the position after what it read of each stream.
func (s *Supervisor) backlog(ctx context.Context, e *sandbox, r *redact.Redactor, q LogQuery) ([]LogLine, []int64, error) {
	tail := q.TailBytes
	if tail <= 0 {
		tail = DefaultLogTail
	}
	var merged []LogLine
	var next []int64
	for _, st := range q.streams(e.id) {
		raw, pos, err := s.logs.Lines(st.rel, int64(tail), redactMargin, q.Since)
		if err != nil {
			return nil, nil, err
		}
		lines, err := redactLines(ctx, r, st.name, raw)
		if err != nil {
			return nil, nil, err
		}
		// The margin and what came before since go; then whole lines
		// from the front, until the stream is within tail.
		lines = slices.DeleteFunc(lines, func(l LogLine) bool { return l.At.Before(q.Since) })
		size := 0
		for _, l := range lines {
			size += len(l.Text)
		}
		for len(lines) > 1 && size > tail {
			size -= len(lines[0].Text)
			lines = lines[1:]
		}
		if len(lines) == 1 {
			lines[0].Text = logcap.ClipStart(lines[0].Text, tail)
		}
		merged = logcap.Merge(merged, lines, LogLine.at)
		next = append(next, pos)
	}
	if q.Lines > 0 && len(merged) > q.Lines {
		merged = merged[len(merged)-q.Lines:]
	}
	return merged, next, nil
}

func (l LogLine) at() time.Time { return l.At }

// redactLines redacts lines of one stream as one text (a secret across
// lines is found) and keeps them apart.
func redactLines(ctx context.Context, r *redact.Redactor, name string, raw []logcap.Line) ([]LogLine, error) {
	var text strings.Builder
	ends := make([]int, len(raw))
	for i, l := range raw {
		text.WriteString(strings.ToValidUTF8(l.Text, "\uFFFD"))
		ends[i] = text.Len()
	}
	red, err := r.RedactParts(ctx, text.String(), ends)
	if err != nil {
		return nil, err
	}
	out := make([]LogLine, len(raw))
	for i, l := range raw {
		out[i] = LogLine{Stream: name, At: l.At, Text: red[i]}
	}
	return out, nil
}

// secretsOf returns the values of e's env whose keys look secret, plus
// every forwarded credential.
func (s *Supervisor) secretsOf(e *sandbox) []string {
	env, err := s.envOf(e)
	if err != nil {
		s.log.Warn("read sandbox environment for redaction", "sandbox", e.id, "err", err)
	}
	return s.secretsIn(env)
}

// secretsIn is secretsOf for a sandbox environment already read: the
// values of secret names, the passwords inside URLs, the daemon's
// forwarded credentials and its own (SetCredentials).
func (s *Supervisor) secretsIn(env map[string]string) []string {
	out := s.opts.Env.Secrets()
	if c := s.credentials.Load(); c != nil {
		out = append(out, *c...)
	}
	for k, v := range env {
		if redact.SecretKey(k) {
			out = append(out, v)
		} else if pw := redact.URLPassword(v); pw != "" {
			out = append(out, pw)
		}
	}
	return out
}

// SetCredentials names the daemon's own credentials (its token), which
// are redacted from every output the supervisor answers with, whatever a
// workload prints. A later call replaces them (a rotation).
func (s *Supervisor) SetCredentials(values ...string) {
	values = slices.Clone(values)
	s.credentials.Store(&values)
}

// LogChunk is a piece of a followed log: one line of one stream, or a
// piece of it, redacted, and when it was written.
type LogChunk struct {
	Stream string // "stdout" or "stderr"
	At     time.Time
	Text   string
}

// FollowChunk bounds one LogChunk's text: escaped as a JSON string (six
// bytes for a control byte at worst) it stays one SSE line within the
// API's 16 KiB bound.
const FollowChunk = 2 << 10

// FollowLogs passes emit the lines q picks of the sandbox's stdout and
// stderr and then what they gain, redacted with the secret values of its
// environment, both streams in the order they were written, until the
// sandbox is no longer running (after its last output), ctx ends or emit
// fails. It follows the logs across rotation. It returns the sandbox as
// it was when the following ended.
//
// Whole lines are redacted at once (a secret is never cut in two), then
// passed on a line at a time, in chunks of at most FollowChunk bytes. A
// follower holds at most logcap.MaxFollowLine bytes of a line not yet
// ended per stream.
func (s *Supervisor) FollowLogs(ctx context.Context, id string, q LogQuery, emit func(LogChunk) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	r := redact.New(s.secretsOf(e))
	send := func(lines []LogLine) error {
		for _, l := range lines {
			for red := l.Text; red != ""; {
				n := min(len(red), FollowChunk)
				for n < len(red) && !utf8.RuneStart(red[n]) {
					n--
				}
				if err := emit(LogChunk{Stream: l.Stream, At: l.At, Text: red[:n]}); err != nil {
					return err
				}
				red = red[n:]
			}
		}
		return nil
	}
	backlog, next, err := s.backlog(ctx, e, r, q)
	if err != nil {
		return Sandbox{}, err
	}
	if err := send(backlog); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return e.info, err
	}
	var followers []*logcap.Follower
	for i, st := range q.streams(e.id) {
		followers = append(followers, &logcap.Follower{Name: st.name, Rel: st.rel, Pos: next[i]})
	}
	for {
		// Waiters first, then the reads: a write or a change after
		// them wakes us. A stop is a change: nothing wakes a log then.
		var written [2]<-chan struct{} // nil for a stream not followed
		for i, f := range followers {
			written[i] = s.logs.Wait(f.Rel)
		}
		s.mu.Lock()
		sb, changed := e.info, e.changesLocked()
		live := sb.State.Live() && s.sandboxes[id] == e
		s.mu.Unlock()
		var merged []LogLine
		for _, f := range followers {
			var raw []logcap.Line
			if err := f.Drain(s.logs, !live, func(_, text string, end int64) error {
				raw = append(raw, logcap.SplitLines([]byte(text), end-int64(len(text)))...)
				return nil
			}); err != nil {
				return sb, err
			}
			s.logs.Date(f.Rel, raw)
			lines, err := redactLines(ctx, r, f.Name, raw)
			if err != nil {
				return sb, err
			}
			merged = logcap.Merge(merged, lines, LogLine.at)
		}
		if err := send(merged); err != nil {
			return sb, err
		}
		if !live {
			return sb, nil
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-changed:
		case <-written[0]:
		case <-written[1]:
		}
	}
}
