package api

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/host"
	"github.com/agent-control-plane/agent-control-plane/api/signin"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// home serves the dashboard's page. It holds no data, so it is served to
// anyone; the page signs itself in with the code in its URL's fragment
// (see package signin) and otherwise says how to get one. A link of the
// old form, with the token in its query, is refused: the token must not
// sit in a browser's history.
func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if r.URL.Query().Has("token") {
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		s.page(w, http.StatusBadRequest, pageData{Title: "This link is no longer used",
			Body: "Sign-in links do not carry the token any more. Run agent-control-plane dashboard for a one-time link, and clear this address from your browser's history."})
		return
	}
	// Its script and style come from /ui/ and nothing else may run or
	// load.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.Write(dashboardHTML)
}

type pageData struct{ Title, Body string }

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Title}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222;background:#fff}
@media (prefers-color-scheme:dark){body{color:#ddd;background:#111}}</style></head>
<body><h1>{{.Title}}</h1><p>{{.Body}}</p></body></html>
`))

func (s *Server) page(w http.ResponseWriter, code int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = pageTmpl.Execute(w, d)
}

// newLink makes a one-time sign-in code (token only: a session must not
// extend itself).
func (s *Server) newLink(w http.ResponseWriter, r *http.Request) {
	l, err := s.host.SignIns().NewLink()
	if err != nil {
		writeError(w, wire.CodeTooManyLinks, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, wire.DashboardLink{Code: l.Code, LinkID: l.ID, ExpiresAt: wire.Time{Time: l.ExpiresAt}})
}

// redeem trades a sign-in code for a session. It is open (the page has
// no credential yet) but only to the daemon's own page: a request with an
// Origin must come from the daemon's own origin.
func (s *Server) redeem(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, wire.CodeForbiddenOrigin, "only the daemon's own page may sign in; origin "+quote(o)+" is another")
			return
		}
	}
	var req wire.RedeemRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, wire.CodeInvalidRequest, err.Error())
		return
	}
	sess, secret, err := s.host.SignIns().Redeem(req.Code, r.UserAgent())
	switch {
	case errors.Is(err, signin.ErrBadCode):
		writeError(w, wire.CodeInvalidCode, err.Error())
		return
	case err != nil:
		s.log.Warn("dashboard session", "err", err)
	}
	out := wireSession(sess, "")
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

func wireSession(sess signin.SignIn, current string) wire.DashboardSession {
	return wire.DashboardSession{
		ID: sess.ID, LinkID: sess.LinkID, CreatedAt: wire.Time{Time: sess.CreatedAt}, ExpiresAt: wire.Time{Time: sess.ExpiresAt},
		LastUsedAt: wire.Time{Time: sess.LastUsedAt}, UserAgent: sess.UserAgent, Current: sess.ID == current && current != "",
	}
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	me := host.CallerOf(r.Context()).SignIn
	out := wire.DashboardSessionList{Items: []wire.DashboardSession{}}
	for _, sess := range s.host.SignIns().List() {
		out.Items = append(out.Items, wireSession(sess, me))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeSession(w http.ResponseWriter, r *http.Request) {
	err := s.host.SignIns().Revoke(r.PathValue("id"))
	switch {
	case errors.Is(err, signin.ErrNotFound):
		writeError(w, wire.CodeNotFound, "no dashboard session "+quote(r.PathValue("id")))
		return
	case err != nil:
		s.log.Warn("dashboard sessions: the file could not be rewritten", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) revokeSessions(w http.ResponseWriter, r *http.Request) {
	if err := s.host.SignIns().RevokeAll(); err != nil {
		s.log.Warn("dashboard sessions: the file could not be rewritten", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}
