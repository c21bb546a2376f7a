package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/api/wsock"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/interp"
)

// Daytona's code interpreter: contexts whose python state lives from one
// run to the next (the supervisor's interp), code run over a WebSocket.

// InterpreterContext is Daytona's InterpreterContext.
type InterpreterContext struct {
	ID        string `json:"id"`
	Cwd       string `json:"cwd"`
	Language  string `json:"language"`
	CreatedAt string `json:"createdAt"`
	Active    bool   `json:"active"`
}

// timeoutClose is the close code Daytona's SDKs read as a timeout.
const timeoutClose websocket.StatusCode = 4001

func (a *API) interpreterRoutes(p string) []Route {
	return []Route{
		{"GET", p + "/process/interpreter/context", a.listContexts, false, true, false},
		{"POST", p + "/process/interpreter/context", a.createContext, true, true, false},
		{"DELETE", p + "/process/interpreter/context/{cid}", a.deleteContext, true, true, false},
		{"GET", p + "/process/interpreter/execute", a.executeCode, false, true, false},
	}
}

func contextOf(c *interp.Context, workDir string) InterpreterContext {
	cwd := c.Cwd
	if cwd == "" {
		cwd = workDir
	}
	return InterpreterContext{ID: c.ID, Cwd: cwd, Language: interp.Language,
		CreatedAt: c.Created.UTC().Format(time.RFC3339Nano), Active: c.Active()}
}

func (a *API) createContext(w http.ResponseWriter, r *http.Request) {
	var b struct{ Cwd, Language string }
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	if b.Language != "" && b.Language != interp.Language {
		badRequest(w, r, fmt.Sprintf("the interpreter speaks python only, not %q", supervisor.Clip(b.Language, 40)))
		return
	}
	c, err := a.sup.CreateContext(r.PathValue("id"), b.Cwd)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, contextOf(c, a.workDirOf(r)))
}

func (a *API) listContexts(w http.ResponseWriter, r *http.Request) {
	list, err := a.sup.Contexts(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	wd := a.workDirOf(r)
	out := []InterpreterContext{}
	for _, c := range list {
		out = append(out, contextOf(c, wd))
	}
	writeJSON(w, http.StatusOK, map[string]any{"contexts": out})
}

func (a *API) deleteContext(w http.ResponseWriter, r *http.Request) {
	if err := a.sup.DeleteContext(r.PathValue("id"), r.PathValue("cid")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "context deleted"})
}

// executeRequest is the first message of an execute's WebSocket.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"contextId"`
	Envs      map[string]string `json:"envs"`
	Timeout   *int64            `json:"timeout"` // seconds
}

// executeCode runs the code the client sends first and streams its
// output as Daytona's messages ({"type":"stdout","text":…}, …), then
// closes normally, or with 4001 when it ran past its timeout.
func (a *API) executeCode(w http.ResponseWriter, r *http.Request) {
	if _, err := a.sup.Contexts(r.PathValue("id")); err != nil { // a sandbox that runs, before the switch
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	c, ok := wsock.Accept(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	var req executeRequest
	rctx, cancel := context.WithTimeout(ctx, wsock.WriteTimeout)
	err := wsjson.Read(rctx, c, &req)
	cancel()
	if err != nil {
		_ = c.Close(websocket.StatusInvalidFramePayloadData, "the first message must be {\"code\": …}")
		return
	}
	ctx = c.CloseRead(ctx) // ends when the client goes
	var timeout time.Duration
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	err = a.sup.RunCode(ctx, r.PathValue("id"), req.ContextID, req.Code, req.Envs, timeout, func(m interp.Message) error {
		return wsock.WriteJSON(ctx, c, m)
	})
	switch {
	case errors.Is(err, interp.ErrTimeout):
		_ = c.Close(timeoutClose, "execution timed out")
		return
	case err != nil && ctx.Err() == nil:
		_ = wsock.WriteJSON(ctx, c, interp.Message{Type: "error", Name: "InterpreterError", Value: err.Error()})
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
}
