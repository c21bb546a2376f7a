package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"
)

// The container's output is copied into the sandbox's log files with the
// engine's timestamps asked for and stripped: each file remembers the
// engine time of the last line copied into it (an extended attribute), so
// that a restarted daemon resumes right after it — never from the file's
// modification time, which the kernel records coarser than the engine's
// timestamps (a line copied twice), and which a rotation moves.
const loggedUntilAttr = "user.agent-control-plane.logged-until"

// follow copies the container's output, demultiplexed, into the sandbox's
// log files, after since (zero: from the start) until the container ends
// or Delete. The supervisor caps, rotates and redacts those files as it
// does a process's.
func (h *handle) follow(since time.Time) {
	if h.st.Stdout == "" {
		return
	}
	// Opened (made) before the copy starts: the supervisor watches them
	// from the create on.
	out, err1 := openLog(h.st.Stdout)
	errf, err2 := openLog(h.st.Stderr)
	if err := errors.Join(err1, err2); err != nil {
		h.r.Log.Warn("open sandbox log", "err", err)
		if out != nil {
			out.Close()
		}
		if errf != nil {
			errf.Close()
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.mu.Lock()
	h.unfollow = cancel
	h.mu.Unlock()
	h.followed.Go(func() {
		defer cancel()
		defer out.Close()
		defer errf.Close()
		opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true}
		if !since.IsZero() {
			// The engine's since is inclusive: the line at since was
			// copied already.
			opts.Since = engineTime(since.Add(time.Nanosecond))
		}
		rc, err := h.r.Client.ContainerLogs(ctx, h.st.ID, opts)
		if err != nil {
			if ctx.Err() == nil {
				h.r.Log.Warn("follow container output", "container", h.st.ID[:12], "err", err)
			}
			return
		}
		defer rc.Close()
		_, _ = stdcopy.StdCopy(&stampedLog{f: out}, &stampedLog{f: errf}, rc)
	})
}

// engineTime is t as the engine's since parameter: seconds and
// nanoseconds, exactly (a float64 of nanoseconds since 1970 loses the
// last digits).
func engineTime(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// stampedLog writes the engine's log messages into a log file: each
// write is one message, "RFC3339Nano-time SP text"; the text is written
// and the time kept on the file. A message whose time cannot be read is
// written whole. The time is also left on the file before the text is
// written (logcap.WrittenAtAttr), so that the log cap, woken by the
// write, dates the text with the engine's time; the resume point is set
// only after it, so that a crash between the two never skips a message.
type stampedLog struct {
	f    *os.File
	last time.Time
}

func (w *stampedLog) Write(p []byte) (int, error) {
	text := p
	var at time.Time
	if sp := bytes.IndexByte(p, ' '); sp > 0 {
		if t, err := time.Parse(time.RFC3339Nano, string(p[:sp])); err == nil {
			at, text = t, p[sp+1:]
		}
	}
	stamp := []byte(at.Format(time.RFC3339Nano))
	if !at.IsZero() {
		_ = unix.Fsetxattr(int(w.f.Fd()), logcap.WrittenAtAttr, stamp, 0)
	}
	if _, err := w.f.Write(text); err != nil {
		return 0, err
	}
	if !at.IsZero() && at.After(w.last) {
		w.last = at
		// Best effort: a file system without user attributes resumes
		// from the modification time, as before.
		_ = unix.Fsetxattr(int(w.f.Fd()), loggedUntilAttr, stamp, 0)
	}
	return len(p), nil
}

// loggedUntil is the engine time of the last line copied into the log
// files, or, where a file keeps none, its modification time: following
// resumes after it.
func loggedUntil(paths ...string) time.Time {
	var t time.Time
	for _, p := range paths {
		at := time.Time{}
		buf := make([]byte, 64)
		if n, err := unix.Lgetxattr(p, loggedUntilAttr, buf); err == nil {
			at, _ = time.Parse(time.RFC3339Nano, string(buf[:n]))
		}
		if at.IsZero() {
			if fi, err := os.Lstat(p); err == nil {
				at = fi.ModTime()
			}
		}
		if at.After(t) {
			t = at
		}
	}
	return t
}

// openLog opens a sandbox log for appending; a link in its place is
// refused.
func openLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
}
