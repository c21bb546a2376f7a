package daytona

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/api/wsock"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
)

// Session and Command are Daytona's.
type Session struct {
	SessionID string    `json:"sessionId"`
	Commands  []Command `json:"commands"`
}

type Command struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

// SessionExecuteResponse is Daytona's.
type SessionExecuteResponse struct {
	CmdID    string `json:"cmdId"`
	Output   string `json:"output,omitempty"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

// LogsResponse is Daytona's SessionCommandLogsResponse.
type LogsResponse struct {
	Output string `json:"output"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// EntrypointSession is the session id of the sandbox's own workload.
const EntrypointSession = "entrypoint"

func sessionOf(s *shell.Session) Session {
	out := Session{SessionID: s.ID, Commands: []Command{}}
	for _, c := range s.Commands() {
		out.Commands = append(out.Commands, Command{ID: c.ID, Command: c.Line, ExitCode: c.ExitCode()})
	}
	return out
}

func (a *API) sessionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, shell.ErrNoSuch):
		WriteError(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, shell.ErrClosed), errors.Is(err, shell.ErrFinished):
		WriteError(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, shell.ErrBusy), errors.Is(err, shell.ErrInputFull):
		WriteError(w, r, http.StatusTooManyRequests, err.Error())
	default:
		a.fail(w, r, err, wire.CodeInternal)
	}
}

func (a *API) createSession(w http.ResponseWriter, r *http.Request) {
	var b struct {
		SessionID string `json:"sessionId"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.SessionID == EntrypointSession {
		WriteError(w, r, http.StatusConflict, "entrypoint is the session of the sandbox's own workload")
		return
	}
	if _, err := a.sup.CreateSession(r.PathValue("id"), b.SessionID); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (a *API) listSessions(w http.ResponseWriter, r *http.Request) {
	list, err := a.sup.Sessions(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	out := []Session{}
	for _, s := range list {
		out = append(out, sessionOf(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) session(w http.ResponseWriter, r *http.Request) (*shell.Session, bool) {
	s, err := a.sup.Session(r.PathValue("id"), r.PathValue("sid"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return nil, false
	}
	return s, true
}

func (a *API) getSession(w http.ResponseWriter, r *http.Request) {
	if s, ok := a.session(w, r); ok {
		writeJSON(w, http.StatusOK, sessionOf(s))
	}
}

func (a *API) deleteSession(w http.ResponseWriter, r *http.Request) {
	if err := a.sup.DeleteSession(r.PathValue("id"), r.PathValue("sid")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionExec runs a command in the session: with async (or runAsync)
// the answer is 202 with its id at once; otherwise 200 once it has ended,
// with its output. A client that leaves a synchronous command leaves it
// running in the session (it is the session's), as on Daytona.
func (a *API) sessionExec(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Command           string `json:"command"`
		Async             bool   `json:"async,omitempty"`
		RunAsync          bool   `json:"runAsync,omitempty"`
		SuppressInputEcho bool   `json:"suppressInputEcho,omitempty"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if strings.TrimSpace(b.Command) == "" {
		badRequest(w, r, "command is required")
		return
	}
	c, err := a.sup.SessionRun(r.PathValue("id"), r.PathValue("sid"), b.Command)
	if err != nil {
		a.sessionError(w, r, err)
		return
	}
	if b.Async || b.RunAsync {
		writeJSON(w, http.StatusAccepted, SessionExecuteResponse{CmdID: c.ID})
		return
	}
	select {
	case <-c.Done():
	case <-r.Context().Done():
		return
	}
	stdout, stderr, output := a.logsOf(r, c)
	writeJSON(w, http.StatusOK, SessionExecuteResponse{CmdID: c.ID, Output: output, Stdout: stdout, Stderr: stderr, ExitCode: c.ExitCode()})
}

func (a *API) command(w http.ResponseWriter, r *http.Request) (*shell.Command, bool) {
	s, ok := a.session(w, r)
	if !ok {
		return nil, false
	}
	c, err := s.Command(r.PathValue("cid"))
	if err != nil {
		a.sessionError(w, r, err)
		return nil, false
	}
	return c, true
}

// logsOf is a command's output, redacted as the sandbox's logs are.
func (a *API) logsOf(r *http.Request, c *shell.Command) (stdout, stderr, output string) {
	out := a.sup.CommandOutput(r.PathValue("id"), c)
	return out.Stdout, out.Stderr, out.Merged
}

func (a *API) getCommand(w http.ResponseWriter, r *http.Request) {
	if c, ok := a.command(w, r); ok {
		writeJSON(w, http.StatusOK, Command{ID: c.ID, Command: c.Line, ExitCode: c.ExitCode()})
	}
}

func (a *API) sendInput(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Data string `json:"data"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if err := a.sup.SessionInput(r.PathValue("id"), r.PathValue("sid"), r.PathValue("cid"), b.Data); err != nil {
		a.sessionError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// commandLogs answers a command's output so far; with follow=true it is
// streamed (chunked text/plain) as it comes, to the command's end.
func (a *API) commandLogs(w http.ResponseWriter, r *http.Request) {
	follow, ok := boolQuery(w, r, "follow")
	if !ok {
		return
	}
	c, ok := a.command(w, r)
	if !ok {
		return
	}
	if !follow {
		stdout, stderr, output := a.logsOf(r, c)
		writeJSON(w, http.StatusOK, LogsResponse{Output: output, Stdout: stdout, Stderr: stderr})
		return
	}
	if wsock.IsUpgrade(r) {
		a.streamLogs(w, r, func(ctx context.Context, emit func(stderr bool, text string) error) {
			a.sup.FollowCommand(ctx, r.PathValue("id"), c, emit)
		})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	a.sup.FollowCommand(r.Context(), r.PathValue("id"), c, func(_ bool, text string) error {
		if _, err := w.Write([]byte(text)); err != nil {
			return err
		}
		return rc.Flush()
	})
}

// Markers that tell a followed log's streams apart on a WebSocket, as
// Daytona's SDKs read them.
var (
	stdoutMark = []byte{1, 1, 1}
	stderrMark = []byte{2, 2, 2}
)

// streamLogs sends what follow emits over a WebSocket, each piece after
// its stream's marker, and closes it normally at the end.
func (a *API) streamLogs(w http.ResponseWriter, r *http.Request, follow func(ctx context.Context, emit func(stderr bool, text string) error)) {
	c, ok := wsock.Accept(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx := c.CloseRead(r.Context()) // ends when the client goes
	follow(ctx, func(stderr bool, text string) error {
		mark := stdoutMark
		if stderr {
			mark = stderrMark
		}
		return wsock.Write(ctx, c, websocket.MessageBinary, append(slices.Clip(mark), text...))
	})
	_ = c.Close(websocket.StatusNormalClosure, "")
}

// entrypointSession is the sandbox's own workload as a session: one
// command, its snapshot's, running while the sandbox does.
func (a *API) entrypointSession(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sup.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	cmd := Command{ID: EntrypointSession, Command: "snapshot " + sb.Snapshot}
	writeJSON(w, http.StatusOK, Session{SessionID: EntrypointSession, Commands: []Command{cmd}})
}

// entrypointLogs are the workload's logs, redacted as on /v1; with
// follow=true over a WebSocket, streamed as they come while it runs.
func (a *API) entrypointLogs(w http.ResponseWriter, r *http.Request) {
	follow, ok := boolQuery(w, r, "follow")
	if !ok {
		return
	}
	if follow && wsock.IsUpgrade(r) {
		id := r.PathValue("id")
		if _, err := a.sup.Get(id); err != nil {
			a.fail(w, r, err, wire.CodeInternal)
			return
		}
		a.streamLogs(w, r, func(ctx context.Context, emit func(stderr bool, text string) error) {
			a.sup.FollowLogs(ctx, id, supervisor.LogQuery{}, func(c supervisor.LogChunk) error {
				return emit(c.Stream == "stderr", c.Text)
			})
		})
		return
	}
	l, err := a.sup.EntrypointLogs(r.Context(), r.PathValue("id"), supervisor.LogQuery{})
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, LogsResponse{Output: l.Output(), Stdout: l.Stdout, Stderr: l.Stderr})
}
