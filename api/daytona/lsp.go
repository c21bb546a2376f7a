package daytona

import (
	"net/http"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor/lsp"
)

// Daytona's language servers: the server for a language (pylsp for
// python, typescript-language-server for typescript) run in the sandbox
// per project, spoken to over LSP.

// lspRequest is LspServerRequest, LspDocumentRequest and
// LspCompletionParams at once.
type lspRequest struct {
	LanguageID    string        `json:"languageId"`
	PathToProject string        `json:"pathToProject"`
	URI           string        `json:"uri"`
	Position      *lsp.Position `json:"position"`
	Context       any           `json:"context"`
}

func (a *API) lspRoutes(p string) []Route {
	return []Route{
		{"POST", p + "/lsp/completions", a.lspCompletions, false, true, false},
		{"POST", p + "/lsp/did-close", a.lspDidClose, false, true, false},
		{"POST", p + "/lsp/did-open", a.lspDidOpen, false, true, false},
		{"GET", p + "/lsp/document-symbols", a.lspDocumentSymbols, false, true, false},
		{"POST", p + "/lsp/start", a.lspStart, true, true, false},
		{"POST", p + "/lsp/stop", a.lspStop, true, true, false},
		{"GET", p + "/lsp/workspacesymbols", a.lspWorkspaceSymbols, false, true, false},
	}
}

// lspBody decodes a request that names a language and a project (and,
// with uri, a document).
func lspBody(w http.ResponseWriter, r *http.Request, uri bool) (lspRequest, bool) {
	var b lspRequest
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return b, false
	}
	if b.LanguageID == "" || b.PathToProject == "" || uri && b.URI == "" {
		msg := "languageId and pathToProject are required"
		if uri {
			msg = "languageId, pathToProject and uri are required"
		}
		badRequest(w, r, msg)
		return b, false
	}
	return b, true
}

func (a *API) lspStart(w http.ResponseWriter, r *http.Request) {
	b, ok := lspBody(w, r, false)
	if !ok {
		return
	}
	if err := a.sup.StartLanguageServer(r.Context(), r.PathValue("id"), b.LanguageID, b.PathToProject); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *API) lspStop(w http.ResponseWriter, r *http.Request) {
	b, ok := lspBody(w, r, false)
	if !ok {
		return
	}
	if err := a.sup.StopLanguageServer(r.PathValue("id"), b.LanguageID, b.PathToProject); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *API) lspDidOpen(w http.ResponseWriter, r *http.Request) {
	b, ok := lspBody(w, r, true)
	if !ok {
		return
	}
	if err := a.sup.OpenDocument(r.Context(), r.PathValue("id"), b.LanguageID, b.PathToProject, b.URI); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *API) lspDidClose(w http.ResponseWriter, r *http.Request) {
	b, ok := lspBody(w, r, true)
	if !ok {
		return
	}
	srv, err := a.sup.LanguageServer(r.PathValue("id"), b.LanguageID, b.PathToProject)
	if err == nil {
		err = srv.Close(b.URI)
	}
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// lspQuery is the server the query names, or false once answered.
func (a *API) lspQuery(w http.ResponseWriter, r *http.Request, need ...string) (*lsp.Server, bool) {
	q := r.URL.Query()
	for _, k := range append([]string{"languageId", "pathToProject"}, need...) {
		if q.Get(k) == "" {
			badRequest(w, r, k+" is required")
			return nil, false
		}
	}
	srv, err := a.sup.LanguageServer(r.PathValue("id"), q.Get("languageId"), q.Get("pathToProject"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return nil, false
	}
	return srv, true
}

func (a *API) lspDocumentSymbols(w http.ResponseWriter, r *http.Request) {
	srv, ok := a.lspQuery(w, r, "uri")
	if !ok {
		return
	}
	syms, err := srv.DocumentSymbols(r.Context(), r.URL.Query().Get("uri"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, syms)
}

func (a *API) lspWorkspaceSymbols(w http.ResponseWriter, r *http.Request) {
	srv, ok := a.lspQuery(w, r)
	if !ok {
		return
	}
	syms, err := srv.WorkspaceSymbols(r.Context(), r.URL.Query().Get("query"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, syms)
}

func (a *API) lspCompletions(w http.ResponseWriter, r *http.Request) {
	b, ok := lspBody(w, r, true)
	if !ok {
		return
	}
	if b.Position == nil {
		badRequest(w, r, "position is required")
		return
	}
	srv, err := a.sup.LanguageServer(r.PathValue("id"), b.LanguageID, b.PathToProject)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	list, err := srv.Completions(r.Context(), b.URI, *b.Position, b.Context)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, list)
}
