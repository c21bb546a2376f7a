package daytona

import (
	"crypto/rand"
	"net/http"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/api/wsock"
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
	spec := terminal.Spec{ID: b.ID, Dir: b.Cwd, Env: b.Envs, Lazy: b.LazyStart}
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

// connectPty is a PTY's WebSocket as Daytona's SDKs read it
// (wsock.ServeTerminal); every message the client sends is typed in.
func (a *API) connectPty(w http.ResponseWriter, r *http.Request) {
	id, sid := r.PathValue("id"), r.PathValue("sid")
	t, err := a.sup.Terminal(id, sid)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	c, ok := wsock.Accept(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	wsock.ServeTerminal(r.Context(), c, t, func(p []byte) error { return a.sup.TerminalInput(id, sid, p) }, nil)
}
