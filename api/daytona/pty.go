package daytona

import (
	"context"
	"crypto/rand"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Daytona's PTY sessions are the supervisor's terminals: the sandbox's
// shell on a real terminal (in its cgroup, a TTY exec in docker).

// PtyCreateRequest is Daytona's PtyCreateRequest.
type PtyCreateRequest struct {
	ID        string            `json:"id"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	Cols      *int              `json:"cols"`
	Rows      *int              `json:"rows"`
	LazyStart bool              `json:"lazyStart"`
}

// PtySessionInfo is Daytona's PtySessionInfo.
type PtySessionInfo struct {
	ID        string            `json:"id"`
	Cwd       string            `json:"cwd"`
	Envs      map[string]string `json:"envs"`
	Cols      int               `json:"cols"`
	Rows      int               `json:"rows"`
	CreatedAt string            `json:"createdAt"`
	Active    bool              `json:"active"`
	LazyStart bool              `json:"lazyStart"`
}

func ptyInfo(i terminal.Info, workDir string) PtySessionInfo {
	env := i.Env
	if env == nil {
		env = map[string]string{}
	}
	cwd := i.Dir
	if cwd == "" {
		cwd = workDir
	}
	return PtySessionInfo{ID: i.ID, Cwd: cwd, Envs: env, Cols: i.Cols, Rows: i.Rows,
		CreatedAt: i.Created.UTC().Format(time.RFC3339Nano), Active: i.Active, LazyStart: i.Lazy}
}

// defaultTerm is TERM in a PTY whose request sets none.
const defaultTerm = "xterm-256color"

func (a *API) ptyRoutes(p string) []Route {
	return []Route{
		{"GET", p + "/process/pty", a.listPty, false, true, false},
		{"POST", p + "/process/pty", a.createPty, true, true, false},
		{"DELETE", p + "/process/pty/{sid}", a.deletePty, true, true, false},
		{"GET", p + "/process/pty/{sid}", a.getPty, false, true, false},
		{"GET", p + "/process/pty/{sid}/connect", a.connectPty, false, true, false},
		{"POST", p + "/process/pty/{sid}/resize", a.resizePty, true, true, false},
	}
}

func (a *API) createPty(w http.ResponseWriter, r *http.Request) {
	var b PtyCreateRequest
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.ID == "" {
		b.ID = "pty-" + rand.Text()[:12]
	}
	env := map[string]string{"TERM": defaultTerm}
	for k, v := range b.Envs {
		env[k] = v
	}
	spec := terminal.Spec{ID: b.ID, Dir: b.Cwd, Env: env, Lazy: b.LazyStart}
	if b.Cols != nil {
		spec.Cols = *b.Cols
	}
	if b.Rows != nil {
		spec.Rows = *b.Rows
	}
	if _, err := a.sup.OpenTerminal(r.PathValue("id"), spec, nil); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"sessionId": b.ID})
}

func (a *API) listPty(w http.ResponseWriter, r *http.Request) {
	list, err := a.sup.Terminals(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	wd := a.workDirOf(r)
	out := []PtySessionInfo{}
	for _, t := range list {
		out = append(out, ptyInfo(t.Info(), wd))
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func (a *API) getPty(w http.ResponseWriter, r *http.Request) {
	t, err := a.sup.Terminal(r.PathValue("id"), r.PathValue("sid"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, ptyInfo(t.Info(), a.workDirOf(r)))
}

func (a *API) deletePty(w http.ResponseWriter, r *http.Request) {
	if err := a.sup.CloseTerminal(r.PathValue("id"), r.PathValue("sid")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	// Daytona's document makes the answer a gin.H of objects (its
	// generated clients decode it so): an empty one.
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (a *API) resizePty(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Cols *int `json:"cols"`
		Rows *int `json:"rows"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.Cols == nil || b.Rows == nil {
		badRequest(w, r, "cols and rows are required")
		return
	}
	info, err := a.sup.ResizeTerminal(r.PathValue("id"), r.PathValue("sid"), *b.Cols, *b.Rows)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, ptyInfo(info, a.workDirOf(r)))
}

// workDirOf is the sandbox's workspace as it sees it ("" when it cannot
// be said).
func (a *API) workDirOf(r *http.Request) string {
	f, err := a.sup.Files(r.PathValue("id"))
	if err != nil {
		return ""
	}
	return f.WorkDir()
}

// ptyControl is Daytona's control message on a PTY's WebSocket.
type ptyControl struct {
	Type   string `json:"type"` // "control"
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// connectPty is a PTY's WebSocket as Daytona's SDKs read it: a control
// message once attached, the output kept so far and then as it comes
// (binary), input from every message the client sends, and at the end a
// normal close whose reason is {"exitCode":N}.
func (a *API) connectPty(w http.ResponseWriter, r *http.Request) {
	id, sid := r.PathValue("id"), r.PathValue("sid")
	t, err := a.sup.Terminal(id, sid)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	c, ok := accept(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	kept, at, err := t.Attach()
	if err != nil {
		_ = wsWriteJSON(ctx, c, ptyControl{Type: "control", Status: "error", Error: err.Error()})
		_ = c.Close(websocket.StatusTryAgainLater, "")
		return
	}
	defer at.Detach()
	if wsWriteJSON(ctx, c, ptyControl{Type: "control", Status: "connected"}) != nil {
		return
	}
	if len(kept) > 0 && wsWrite(ctx, c, websocket.MessageBinary, kept) != nil {
		return
	}
	go func() {
		defer cancel()
		for {
			_, p, err := c.Read(ctx)
			if err != nil || a.sup.TerminalInput(id, sid, p) != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case p, open := <-at.Output():
			if !open {
				a.closePty(ctx, c, t, at)
				return
			}
			if wsWrite(ctx, c, websocket.MessageBinary, p) != nil {
				return
			}
		}
	}
}

// closePty ends a PTY's WebSocket once its output has ended: with the
// exit, or saying the client fell behind.
func (a *API) closePty(ctx context.Context, c *websocket.Conn, t *terminal.Terminal, at *terminal.Attachment) {
	if at.Lagged() {
		_ = c.Close(websocket.StatusPolicyViolation, "the client fell behind the terminal's output; connect again")
		return
	}
	select {
	case <-t.Ended():
	case <-ctx.Done():
		return
	}
	e := t.Exit()
	type exit struct {
		ExitCode   int    `json:"exitCode"`
		ExitReason string `json:"exitReason,omitempty"`
	}
	reason := exit{ExitCode: e.Code}
	if e.Reason != "" {
		reason.ExitReason = supervisor.Clip(e.Reason, 60)
	}
	_ = c.Close(websocket.StatusNormalClosure, closeReason(reason))
}
