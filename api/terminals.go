package api

import (
	"crypto/rand"
	"encoding/json"
	"net/http"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/api/wsock"
	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Terminals: a command on a pseudo-terminal in a sandbox, for the CLI's
// exec -t; the supervisor's terminals, as Daytona's PTYs are.

// terminalFields are the names /v1 gives the fields the core checks.
var terminalFields = field.Names{field.Env: "env", field.Argv: "argv"}

func terminalInfo(t *terminal.Terminal) wire.Terminal {
	i := t.Info()
	return wire.Terminal{ID: i.ID, Cols: i.Cols, Rows: i.Rows, Active: i.Active, CreatedAt: i.Created.UTC()}
}

// openTerminal opens a terminal whose command starts when its client
// attaches: nothing it prints is missed.
func (s *Server) openTerminal(w http.ResponseWriter, r *http.Request) {
	var b wire.TerminalRequest
	if err := decodeJSON(r, &b); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	spec := terminal.Spec{ID: "t-" + rand.Text()[:12], Dir: b.Dir, Env: b.Env, Cols: b.Cols, Rows: b.Rows, Lazy: true}
	t, err := s.sup.OpenTerminal(r.PathValue("id"), spec, b.Argv)
	if err != nil {
		s.writeSupervisorError(w, terminalFields.Wrap(err), wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusCreated, terminalInfo(t))
}

func (s *Server) closeTerminal(w http.ResponseWriter, r *http.Request) {
	if err := s.sup.CloseTerminal(r.PathValue("id"), r.PathValue("terminal")); err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// attachTerminal is the terminal's WebSocket (wsock.ServeTerminal): binary
// messages are typed in, a text message resizes it (wire.TerminalResize).
func (s *Server) attachTerminal(w http.ResponseWriter, r *http.Request) {
	id, tid := r.PathValue("id"), r.PathValue("terminal")
	t, err := s.sup.Terminal(id, tid)
	if err != nil {
		s.writeSupervisorError(w, err, wire.CodeInternal)
		return
	}
	c, ok := wsock.Accept(w, r)
	if !ok {
		return
	}
	defer c.CloseNow()
	wsock.ServeTerminal(r.Context(), c, t,
		func(p []byte) error { return s.sup.TerminalInput(id, tid, p) },
		func(p []byte) error {
			var m wire.TerminalResize
			if json.Unmarshal(p, &m) != nil || m.Type != "resize" {
				return nil // not ours to understand: ignored
			}
			_, _ = s.sup.ResizeTerminal(id, tid, m.Cols, m.Rows) // out of range: ignored, the terminal runs on
			return nil
		})
}
