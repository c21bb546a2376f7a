package api

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/session"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// open reports whether r may pass without a credential: the routes the
// table marks open (GET /v1/info, so that probes and `ensure` can tell
// the daemon is there; the dashboard's code exchange), the dashboard page
// and its files (they hold no data), and /metrics unless MetricsAuth.
func (s *Server) open(r *http.Request) bool {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch p := r.URL.Path; {
	case p == "/", strings.HasPrefix(p, "/ui/"):
		return get
	case p == "/metrics":
		return !s.opts.MetricsAuth
	}
	m := r.Method
	if m == http.MethodHead {
		m = http.MethodGet
	}
	return openRoutes[m+" "+r.URL.Path]
}

// openRoutes are the routes the table marks open, by "METHOD path" (none
// has a path parameter).
var openRoutes = func() map[string]bool {
	out := map[string]bool{}
	for _, rt := range routes {
		if rt.access == open {
			out[rt.method+" "+rt.path] = true
		}
	}
	return out
}()

// caller is who made a request: the holder of the token, or a dashboard
// session.
type caller struct {
	token   bool
	session string // the session's id
}

func (c caller) String() string {
	switch {
	case c.token:
		return "token"
	case c.session != "":
		return "session " + c.session
	}
	return "anonymous"
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// authorize reads the request's bearer credential: the daemon's token, or
// a dashboard session's secret. Both are compared in constant time (a
// session is looked up by the hash of what was presented). Nothing else
// counts: no cookie, whatever headers come with it, because a cookie for
// 127.0.0.1 reaches every port of it.
func (s *Server) authorize(r *http.Request) (caller, bool) {
	h := r.Header.Get("Authorization")
	scheme, presented, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return caller{}, false
	}
	presented = strings.TrimSpace(presented)
	if auth.Equal(presented, *s.token.Load()) {
		return caller{token: true}, true
	}
	if sess, ok := s.sessions.Check(presented); ok {
		return caller{session: sess.ID}, true
	}
	return caller{}, false
}

// home serves the dashboard's page. It holds no data, so it is served to
// anyone; the page signs itself in with the code in its URL's fragment
// (see package session) and otherwise says how to get one. A link of the
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
	l, err := s.sessions.NewLink()
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
	sess, secret, err := s.sessions.Redeem(req.Code, r.UserAgent())
	switch {
	case errors.Is(err, session.ErrBadCode):
		writeError(w, wire.CodeInvalidCode, err.Error())
		return
	case err != nil:
		s.log.Warn("dashboard session", "err", err)
	}
	out := wireSession(sess, "")
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

func wireSession(sess session.Session, current string) wire.DashboardSession {
	return wire.DashboardSession{
		ID: sess.ID, LinkID: sess.LinkID, CreatedAt: wire.Time{Time: sess.CreatedAt}, ExpiresAt: wire.Time{Time: sess.ExpiresAt},
		LastUsedAt: wire.Time{Time: sess.LastUsedAt}, UserAgent: sess.UserAgent, Current: sess.ID == current && current != "",
	}
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	me := callerOf(r.Context()).session
	out := wire.DashboardSessionList{Items: []wire.DashboardSession{}}
	for _, sess := range s.sessions.List() {
		out.Items = append(out.Items, wireSession(sess, me))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeSession(w http.ResponseWriter, r *http.Request) {
	err := s.sessions.Revoke(r.PathValue("id"))
	switch {
	case errors.Is(err, session.ErrNotFound):
		writeError(w, wire.CodeNotFound, "no dashboard session "+quote(r.PathValue("id")))
		return
	case err != nil:
		s.log.Warn("dashboard sessions: the file could not be rewritten", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) revokeSessions(w http.ResponseWriter, r *http.Request) {
	if err := s.sessions.RevokeAll(); err != nil {
		s.log.Warn("dashboard sessions: the file could not be rewritten", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}
