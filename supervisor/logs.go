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
	// Cut: older lines the query picks are kept on disk but left out by
	// the byte bound (FollowLogs with All reads them all).
	Cut bool
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
	Until     time.Time // only lines written before it; zero: no bound
	Stream    string    // "stdout" or "stderr" only; "": both
	// All: FollowLogs reads every line kept on disk, oldest first, with
	// no byte bound (TailBytes and Lines are not used).
	All bool
	// Once: FollowLogs ends at the logs' present end instead of following.
	Once bool
}

// LogSize is how much of one stream's log is kept and was written.
type LogSize struct {
	Stream  string // "stdout" or "stderr"
	Live    int64  // bytes in the live file
	Rotated int64  // bytes in the rotated file (stdout.log.1), 0 when none
	Written int64  // every byte written to it, what rotation dropped included
}

// LogSizes says each stream's LogSize.
func (s *Supervisor) LogSizes(id string) ([]LogSize, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	var out []LogSize
	for _, st := range (LogQuery{}).streams(e.id) {
		live, rotated, written, err := s.logs.Size(st.rel)
		if err != nil {
			return nil, err
		}
		out = append(out, LogSize{Stream: st.name, Live: live, Rotated: rotated, Written: written})
	}
	return out, nil
}

// keeps reports whether l is within the query's times.
func (q LogQuery) keeps(l LogLine) bool {
	return !l.At.Before(q.Since) && (q.Until.IsZero() || l.At.Before(q.Until))
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
	lines, _, cut, err := s.backlog(ctx, e, redact.New(s.secretsOf(e)), q)
	if err != nil {
		return Logs{}, err
	}
	out := Logs{Lines: lines, Cut: cut}
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

// backlog reads the lines q picks of e's logs, redacted and merged, the
// position after what it read of each stream, and whether older lines
// it picks were left out by the byte bound.
func (s *Supervisor) backlog(ctx context.Context, e *sandbox, r *redact.Redactor, q LogQuery) (merged []LogLine, next []int64, cut bool, err error) {
	tail := q.TailBytes
	if tail <= 0 {
		tail = DefaultLogTail
	}
	for _, st := range q.streams(e.id) {
		raw, pos, err := s.logs.Lines(st.rel, int64(tail), redactMargin, q.Since)
		if err != nil {
			return nil, nil, false, err
		}
		lines, err := redactLines(ctx, r, st.name, raw)
		if err != nil {
			return nil, nil, false, err
		}
		// The margin, what came before since and from until on go; then
		// whole lines from the front, until the stream is within tail:
		// those are cut (the margin is read only where older lines are
		// kept, so an older line since the start is always one).
		lines = slices.DeleteFunc(lines, func(l LogLine) bool { return !q.keeps(l) })
		size := 0
		for _, l := range lines {
			size += len(l.Text)
		}
		for len(lines) > 1 && size > tail {
			size -= len(lines[0].Text)
			lines, cut = lines[1:], true
		}
		if len(lines) == 1 && len(lines[0].Text) > tail {
			lines[0].Text, cut = logcap.ClipStart(lines[0].Text, tail), true
		}
		merged = logcap.Merge(merged, lines, LogLine.at)
		next = append(next, pos)
	}
	if q.Lines > 0 && len(merged) > q.Lines {
		merged = merged[len(merged)-q.Lines:]
	}
	return merged, next, cut, nil
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
// fails; with q.Once, until the logs' present end; with q.Until, until
// then. It follows the logs
// across rotation. It returns the sandbox as it was when it ended.
//
// Whole lines are redacted at once (a secret is never cut in two), then
// passed on a line at a time, in chunks of at most FollowChunk bytes. A
// follower holds at most logcap.MaxFollowLine bytes of a line not yet
// ended per stream, and reads at most followPass bytes of each stream
// before it passes lines on: q.All reads the whole of a log in as many
// passes as it takes.
func (s *Supervisor) FollowLogs(ctx context.Context, id string, q LogQuery, emit func(LogChunk) error) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	r := redact.New(s.secretsOf(e))
	send := func(lines []LogLine) error {
		for _, l := range lines {
			if !q.keeps(l) {
				continue
			}
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
	followers, err := s.followers(ctx, e, r, q, send)
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return e.info, err
	}
	var held []LogLine // read, but a stream not read as far may precede them
	once := q.Once || !q.Until.IsZero() && !time.Now().Before(q.Until)
	var until <-chan time.Time // following ends at q.Until
	if !q.Until.IsZero() && !once {
		t := time.NewTimer(time.Until(q.Until))
		defer t.Stop()
		until = t.C
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
		live := sb.State.Live() && s.sandboxes[id] == e && !once
		s.mu.Unlock()
		lines, more, horizon, err := s.drainPass(ctx, r, followers, !live)
		if err != nil {
			return sb, err
		}
		held = logcap.Merge(held, lines, LogLine.at)
		ready := len(held)
		if more { // more to read at once: hold what it may precede
			ready, _ = slices.BinarySearchFunc(held, horizon, func(l LogLine, t time.Time) int { return l.At.Compare(t) })
		}
		if err := send(held[:ready]); err != nil {
			return sb, err
		}
		held = held[ready:]
		switch {
		case more:
			continue
		case !live:
			return sb, nil
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-changed:
		case <-written[0]:
		case <-written[1]:
		case <-until:
			once = true
		}
	}
}

// followPass bounds what one pass of FollowLogs reads of each stream.
const followPass = 1 << 20

// followers start FollowLogs' readers: at the oldest byte kept with
// q.All, else after the backlog q picks, which they pass to send first.
func (s *Supervisor) followers(ctx context.Context, e *sandbox, r *redact.Redactor, q LogQuery, send func([]LogLine) error) ([]*logcap.Follower, error) {
	var out []*logcap.Follower
	if q.All {
		for _, st := range q.streams(e.id) {
			f, err := s.logs.Oldest(st.rel)
			if err != nil {
				return nil, err
			}
			f.Name = st.name
			out = append(out, &f)
		}
		return out, nil
	}
	backlog, next, _, err := s.backlog(ctx, e, r, q)
	if err != nil {
		return nil, err
	}
	for i, st := range q.streams(e.id) {
		out = append(out, &logcap.Follower{Name: st.name, Rel: st.rel, Pos: next[i]})
	}
	return out, send(backlog)
}

// drainPass reads at most followPass bytes of each follower's stream,
// redacted and merged. more: a stream has more to read at once; horizon
// is then the time of the last line read of such a stream (the
// earliest; zero when one gave no whole line): lines from it on may yet
// be preceded by that stream's next ones.
func (s *Supervisor) drainPass(ctx context.Context, r *redact.Redactor, followers []*logcap.Follower, final bool) (merged []LogLine, more bool, horizon time.Time, err error) {
	for _, f := range followers {
		var raw []logcap.Line
		atEnd, err := f.DrainAtMost(s.logs, final, followPass, func(_, text string, end int64) error {
			raw = append(raw, logcap.SplitLines([]byte(text), end-int64(len(text)))...)
			return nil
		})
		if err != nil {
			return nil, false, time.Time{}, err
		}
		s.logs.Date(f.Rel, raw)
		lines, err := redactLines(ctx, r, f.Name, raw)
		if err != nil {
			return nil, false, time.Time{}, err
		}
		if !atEnd {
			last := time.Time{}
			if len(lines) > 0 {
				last = lines[len(lines)-1].At
			}
			if !more || last.Before(horizon) {
				horizon = last
			}
			more = true
		}
		merged = logcap.Merge(merged, lines, LogLine.at)
	}
	return merged, more, horizon, nil
}
