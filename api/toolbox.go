package api

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
)

// The toolbox on /v1, in the daemon's own style: a command with its argv
// (no shell unless it names one), its input and its two outputs apart;
// a directory's entries; a file's bytes, down and up.

// Bounds of /v1's exec.
const (
	DefaultExecTimeout = 10 * time.Minute
	MaxExecTimeout     = daytona.MaxExecTimeout
	MaxExecArgs        = 4096
)

// uploadDeadline is how long an upload's body may take to arrive.
const uploadDeadline = 30 * time.Minute

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var b wire.ExecRequest
	if err := decodeJSON(r, &b); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	if len(b.Argv) == 0 || len(b.Argv) > MaxExecArgs || b.Argv[0] == "" {
		writeError(w, wire.CodeInvalidRequest, fmt.Sprintf("argv must hold 1 to %d words, the first the program", MaxExecArgs))
		return
	}
	timeout := DefaultExecTimeout
	if b.TimeoutMs < 0 || time.Duration(b.TimeoutMs)*time.Millisecond > MaxExecTimeout {
		writeError(w, wire.CodeInvalidRequest, fmt.Sprintf("timeoutMs must be 0 to %d", MaxExecTimeout.Milliseconds()))
		return
	} else if b.TimeoutMs > 0 {
		timeout = time.Duration(b.TimeoutMs) * time.Millisecond
	}
	if err := supervisor.ValidateEnv(b.Env); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	env := make([]string, 0, len(b.Env))
	for k, v := range b.Env {
		env = append(env, k+"="+v)
	}
	spec := runtime.ExecSpec{Argv: b.Argv, Env: env, Dir: b.Dir, Timeout: timeout}
	if b.Stdin != "" {
		spec.Stdin = strings.NewReader(b.Stdin)
	}
	stdout, stderr := logcap.NewTail(daytona.MaxExecOutput), logcap.NewTail(daytona.MaxExecOutput)
	spec.Stdout, spec.Stderr = stdout, stderr
	p, err := s.sup.Exec(r.Context(), r.PathValue("id"), spec)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	x, err := p.Wait(r.Context())
	if err != nil {
		return // the client went away: the command ended with its request
	}
	red := s.sup.Redactor(r.PathValue("id"))
	writeJSON(w, http.StatusOK, wire.ExecResponse{ExitCode: x.Code, Signal: int(x.Signal), Reason: x.Reason,
		Stdout: red.Redact(stdout.String()), Stderr: red.Redact(stderr.String()), OutputCut: stdout.Cut() || stderr.Cut()})
}

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
	f, err := s.sup.Files(r.PathValue("id"))
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
		out.Items = append(out.Items, wire.FileEntry{Name: fi.Name, Size: fi.Size, Mode: fmt.Sprintf("%#o", fi.Mode.Perm()),
			Type: fileType(fi.Mode), IsDir: fi.IsDir(), ModTime: wire.Time{Time: fi.ModTime}, Link: fi.Link})
	}
	writeJSON(w, http.StatusOK, out)
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
		m, err := daytona.ParseMode(v)
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
	_ = s.sup.RefreshActivity(r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) maxUpload() int64 {
	if s.opts.MaxUpload > 0 {
		return s.opts.MaxUpload
	}
	return daytona.DefaultUpload
}

// uploadType is the body a route takes instead of JSON, or "": Daytona's
// uploads are multipart forms, /v1's a file's bytes.
func uploadType(r *http.Request) string {
	switch {
	case daytona.IsUpload(r.URL.Path):
		return "multipart/form-data"
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") && strings.HasSuffix(r.URL.Path, "/files/content"):
		return "application/octet-stream"
	}
	return ""
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
	sess, err := s.sup.Session(id, r.PathValue("session"))
	if err != nil {
		s.sessionError(w, err)
		return
	}
	c, err := sess.Run(b.Command)
	if err != nil {
		s.sessionError(w, err)
		return
	}
	_ = s.sup.RefreshActivity(id)
	select {
	case <-c.Done():
	case <-r.Context().Done():
		return
	}
	stdout, stderr, _, cut := c.Logs()
	red := s.sup.Redactor(id)
	code := -1
	if x := c.ExitCode(); x != nil {
		code = *x
	}
	writeJSON(w, http.StatusOK, wire.SessionExecResponse{ID: c.ID, ExitCode: code,
		Stdout: red.Redact(stdout), Stderr: red.Redact(stderr), OutputCut: cut})
}
