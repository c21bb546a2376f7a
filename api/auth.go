package api

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/auth"
)

// SessionCookie is the browser session cookie set by the one-time link.
const SessionCookie = "acp_session"

// open reports whether r may pass without a token: GET /v1/info (so that
// probes and `ensure` can tell the daemon is there), the browser entry
// page, and /metrics unless MetricsAuth.
func (s *Server) open(r *http.Request) bool {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch p := r.URL.Path; {
	case p == "/v1/info", p == "/":
		return get
	case strings.HasPrefix(p, "/ui/"):
		return get // the page's own files hold no data
	case p == "/metrics":
		return !s.opts.MetricsAuth
	}
	return false
}

// authorized reports whether r carries the bearer token, or the browser
// session cookie in a request the browser made from the daemon's own page.
// Both are compared in constant time.
func (s *Server) authorized(r *http.Request) bool {
	token := *s.token.Load()
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, presented, ok := strings.Cut(h, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && auth.Equal(strings.TrimSpace(presented), token)
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && sameOrigin(r) && auth.Equal(c.Value, auth.SessionValue(token))
}

// sameOrigin reports whether a cookie-carrying request comes from the
// daemon's own page: the cookie counts only together with the Host and
// Origin guard, never for a request another page (even another localhost
// one) made.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && strings.EqualFold(u.Host, r.Host)
}

// home is the browser's way in. GET /?token=… (the one-time link that
// `agent-control-plane dashboard` prints) sets an HttpOnly, SameSite=Strict
// session cookie and redirects to /, so that the token leaves the address
// bar; without a session the page says how to get one and shows no data.
func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	token := *s.token.Load()
	if t := r.URL.Query().Get("token"); t != "" {
		if !auth.Equal(t, token) {
			s.page(w, http.StatusUnauthorized, pageData{Title: "This link is not valid", Body: "The token in it is wrong or has been rotated. Run agent-control-plane dashboard for a new link."})
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: SessionCookie, Value: auth.SessionValue(token), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !s.authorized(r) {
		s.page(w, http.StatusOK, pageData{Title: "agent-control-plane", Body: "Run agent-control-plane dashboard in a terminal and open the link it prints."})
		return
	}
	// The dashboard: its script and style come from /ui/ and nothing else
	// may run or load.
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
