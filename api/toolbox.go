package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/fileops"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
)

// The toolbox on /v1, in the daemon's own style: a command with its argv
// (no shell unless it names one), its input and its two outputs apart;
// a directory's entries; a file's bytes, down and up.

// DefaultExecTimeout is how long /v1's exec lets a command run when the
// request does not say.
const DefaultExecTimeout = 10 * time.Minute

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var b wire.ExecRequest
	if err := decodeJSON(r, &b); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	timeout := DefaultExecTimeout
	if b.TimeoutMs < 0 || time.Duration(b.TimeoutMs)*time.Millisecond > supervisor.MaxRunTimeout {
		writeError(w, wire.CodeInvalidRequest, fmt.Sprintf("timeoutMs must be 0 to %d", supervisor.MaxRunTimeout.Milliseconds()))
		return
	} else if b.TimeoutMs > 0 {
		timeout = time.Duration(b.TimeoutMs) * time.Millisecond
	}
	spec := supervisor.RunSpec{Argv: b.Argv, Env: b.Env, Dir: b.Dir, Timeout: timeout}
	if b.Stdin != "" {
		spec.Stdin = strings.NewReader(b.Stdin)
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		s.execStream(w, r, spec)
		return
	}
	res, err := s.sup.Run(r.Context(), r.PathValue("id"), spec)
	if r.Context().Err() != nil {
		return // the client went away: the command ended with its request
	}
	if err != nil {
		s.writeSupervisorError(w, execFields.Wrap(err), wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, wire.ExecResponse{ExitCode: res.Exit.Code, Signal: int(res.Exit.Signal), Reason: res.Exit.Reason,
		Stdout: res.Stdout, Stderr: res.Stderr, OutputCut: res.Cut})
}

// execStream runs spec and streams its output as Server-Sent Events, as
// the command writes it: "stdout" and "stderr" events (wire.ExecChunk),
// then "exit" (wire.ExecResponse without output); the stream begins once
// the command runs, heartbeats keeping a quiet one alive. A command that
// cannot start answers an error instead.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, spec supervisor.RunSpec) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var st *stream
	begin := func() {
		st = startStream(w)
		go st.heartbeat(ctx, s.opts.Heartbeat, cancel)
	}
	errGone := errors.New("the client is gone")
	exit, err := s.sup.RunStream(ctx, r.PathValue("id"), spec, begin, func(stderr bool, text string) error {
		event := wire.ExecEventStdout
		if stderr {
			event = wire.ExecEventStderr
		}
		if !st.sendJSON(event, wire.ExecChunk{Text: text}) {
			return errGone
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return // the client went away: the command ended with its request
	case err != nil && st == nil:
		s.writeSupervisorError(w, execFields.Wrap(err), wire.CodeInternal)
		return
	case err != nil:
		return
	}
	cancel() // no more heartbeats; send takes turns with one under way
	st.sendJSON(wire.ExecEventExit, wire.ExecResponse{ExitCode: exit.Code, Signal: int(exit.Signal), Reason: exit.Reason})
}

// execFields are the names /v1's exec gives the fields the core checks.
var execFields = field.Names{field.Timeout: "timeoutMs", field.Env: "env", field.Argv: "argv"}

// fileError maps a file operation's error.
func (s *Server) fileError(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, wire.CodeTooLarge, fmt.Sprintf("the file is larger than %d bytes (config max_upload_bytes); nothing was written", mbe.Limit))
	case errors.Is(err, runtime.ErrOutside):
		writeError(w, wire.CodePathOutside, err.Error())
	case errors.Is(err, fs.ErrInvalid):
		writeError(w, wire.CodeInvalidRequest, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, wire.CodeNotFound, err.Error())
	default:
		s.writeSupervisorError(w, err, wire.CodeInternal)
	}
}

func (s *Server) sandboxFiles(w http.ResponseWriter, r *http.Request) (runtime.Files, string, bool) {
	f, err := s.sup.StoredFiles(r.PathValue("id"))
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return nil, "", false
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = f.WorkDir()
	}
	return f, p, true
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	f, p, ok := s.sandboxFiles(w, r)
	if !ok {
		return
	}
	list, err := f.List(r.Context(), p)
	if err != nil {
		s.fileError(w, err)
		return
	}
	out := wire.FileList{Items: make([]wire.FileEntry, 0, len(list))}
	for _, fi := range list {
		out.Items = append(out.Items, toFileEntry(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func toFileEntry(fi runtime.FileInfo) wire.FileEntry {
	return wire.FileEntry{Name: fi.Name, Size: fi.Size, Mode: fmt.Sprintf("%#o", fi.Mode.Perm()),
		Type: fileType(fi.Mode), IsDir: fi.IsDir(), ModTime: wire.Time{Time: fi.ModTime}, Link: fi.Link}
}

// fileType names what a directory entry is, as it is: a FIFO or a device
// is not shown as a file.
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "file"
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("path") == "" {
		writeError(w, wire.CodeInvalidRequest, "path is required")
		return
	}
	f, p, ok := s.sandboxFiles(w, r)
	if !ok {
		return
	}
	rc, fi, err := f.Open(r.Context(), p)
	if err != nil {
		s.fileError(w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.Header().Set("X-File-Mode", fmt.Sprintf("%#o", fi.Mode.Perm()))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
}

// writeFile replaces a file with the body, atomically (mode for a new
// file: ?mode=, default 0644), bounded by max_upload_bytes.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("path") == "" {
		writeError(w, wire.CodeInvalidRequest, "path is required")
		return
	}
	mode := fs.FileMode(0o644)
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := fileops.ParseMode(v)
		if err != nil {
			writeError(w, wire.CodeInvalidRequest, err.Error())
			return
		}
		mode = m
	}
	f, p, ok := s.sandboxFiles(w, r)
	if !ok {
		return
	}
	max := s.maxUpload()
	if r.ContentLength > max {
		writeError(w, wire.CodeTooLarge, fmt.Sprintf("the file is %d bytes; at most %d (config max_upload_bytes)", r.ContentLength, max))
		return
	}
	body := io.Reader(http.NoBody)
	if r.Body != nil {
		body = http.MaxBytesReader(w, r.Body, max)
	}
	if _, err := f.Write(r.Context(), p, body, mode); err != nil {
		s.fileError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) maxUpload() int64 {
	if s.opts.MaxUpload > 0 {
		return s.opts.MaxUpload
	}
	return fileops.DefaultMaxUpload
}

func sessionInfo(sess *shell.Session) wire.Session {
	out := wire.Session{Name: sess.ID, Commands: []wire.SessionCommand{}}
	for _, c := range sess.Commands() {
		out.Commands = append(out.Commands, wire.SessionCommand{ID: c.ID, Command: c.Line, ExitCode: c.ExitCode()})
	}
	return out
}

// sessionError maps a session's own errors; the rest are the supervisor's.
func (s *Server) sessionError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, shell.ErrBusy):
		writeError(w, wire.CodeBusy, err.Error())
	case errors.Is(err, shell.ErrClosed):
		writeError(w, wire.CodeNotFound, err.Error()+" (its shell exited, or the sandbox stopped)")
	default:
		s.writeSupervisorError(w, err, wire.CodeInternal)
	}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var b wire.CreateSessionRequest
	if err := decodeJSON(r, &b); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	sess, err := s.sup.CreateSession(r.PathValue("id"), b.Name)
	if err != nil {
		s.sessionError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sessionInfo(sess))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := s.sup.DeleteSession(r.PathValue("id"), r.PathValue("session")); err != nil {
		s.sessionError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionExec runs a line in the session and answers once it has ended;
// a client that leaves leaves it running in the session.
func (s *Server) sessionExec(w http.ResponseWriter, r *http.Request) {
	var b wire.SessionExecRequest
	if err := decodeJSON(r, &b); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	if strings.TrimSpace(b.Command) == "" {
		writeError(w, wire.CodeInvalidRequest, "command is required")
		return
	}
	id := r.PathValue("id")
	c, err := s.sup.SessionRun(id, r.PathValue("session"), b.Command)
	if err != nil {
		s.sessionError(w, err)
		return
	}
	select {
	case <-c.Done():
	case <-r.Context().Done():
		return
	}
	out := s.sup.CommandOutput(id, c)
	code := -1
	if x := c.ExitCode(); x != nil {
		code = *x
	}
	writeJSON(w, http.StatusOK, wire.SessionExecResponse{ID: c.ID, ExitCode: code,
		Stdout: out.Stdout, Stderr: out.Stderr, OutputCut: out.Cut})
}
