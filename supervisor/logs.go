package supervisor

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
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
	}{{logcap.Stdout, &out.Stdout}, {logcap.Stderr, &out.Stderr}} {
		text, err := s.logs.Tail(e.id+"/"+f.name, tail)
		if err != nil {
			return Logs{}, err
		}
		red, err := r.RedactContext(ctx, text)
		if err != nil {
			return Logs{}, err
		}
		*f.dst = logcap.ClipStart(red, tail)
	}
	return out, nil
}

// secretsOf returns the values of e's env whose keys look secret, plus
// every forwarded credential.
func (s *Supervisor) secretsOf(e *sandbox) []string {
	out := s.opts.Env.Secrets()
	env, err := s.envOf(e)
	if err != nil {
		s.log.Warn("read sandbox environment for redaction", "sandbox", e.id, "err", err)
		return out
	}
	for k, v := range env {
		if redact.SecretKey(k) {
			out = append(out, v)
		}
	}
	return out
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

// FollowLogs passes emit the last tail bytes of the sandbox's stdout and
// stderr (from a line's start) and then what they gain, redacted with the
// secret values of its environment, until the sandbox is no longer
// running (after its last output), ctx ends or emit fails. It follows the
// logs across rotation. It returns the sandbox as it was when the
// following ended.
//
// Whole lines are redacted at once (a secret is never cut in two), then
// passed on in chunks of at most FollowChunk bytes. A follower holds at
// most logcap.MaxFollowLine bytes of a line not yet ended per stream.
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
	streams := []*logcap.Follower{{Name: "stdout", Rel: e.id + "/" + logcap.Stdout}, {Name: "stderr", Rel: e.id + "/" + logcap.Stderr}}
	for _, f := range streams {
		if f.Pos, f.SkipLine, err = s.logs.TailFrom(f.Rel, int64(tail)); err != nil {
			return Sandbox{}, err
		}
	}
	for {
		// Waiters first, then the reads: a write or a change after
		// them wakes us. A stop is a change: nothing wakes a log then.
		written := [2]<-chan struct{}{s.logs.Wait(streams[0].Rel), s.logs.Wait(streams[1].Rel)}
		s.mu.Lock()
		sb, changed := e.info, e.changesLocked()
		live := sb.State.Live() && s.sandboxes[id] == e
		s.mu.Unlock()
		for _, f := range streams {
			if err := f.Drain(s.logs, !live, send); err != nil {
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
