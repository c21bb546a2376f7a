package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-control-plane/agent-control-plane/api/auth"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// rawDo sends a request with exactly the given headers: no token is added.
func rawDo(t *testing.T, method, url string, hdr ...string) resp {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	// Redirects are part of what is tested.
	c := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

func routePath(rt route) string {
	return strings.NewReplacer("{id}", "some-sandbox", "{interval}", "5").Replace(rt.path)
}

// Every route of the table but GET /v1/info answers 401 without the token
// or with a wrong one, and lets the right one through.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	e := newEnv(t, nil)
	bad := []struct{ why, header string }{
		{"no token", ""},
		{"wrong token", "Bearer wrong-token-0123456789"},
		{"a prefix of the token", "Bearer " + testToken[:len(testToken)-1]},
		{"the token with another scheme", "Basic " + testToken},
		{"an empty bearer", "Bearer "},
	}
	for _, rt := range routes {
		url := e.srv.URL + routePath(rt)
		for _, b := range bad {
			t.Run(rt.method+" "+rt.path+"/"+b.why, func(t *testing.T) {
				var r resp
				if b.header == "" {
					r = rawDo(t, rt.method, url)
				} else {
					r = rawDo(t, rt.method, url, "Authorization", b.header)
				}
				if rt.path == "/v1/info" {
					if r.code != http.StatusOK {
						t.Fatalf("info is open, got %d %s", r.code, r.body)
					}
					return
				}
				if r.code != http.StatusUnauthorized || r.errCode() != "unauthorized" || !strings.Contains(r.hdr.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("got %d %q %s, want 401 unauthorized with WWW-Authenticate", r.code, r.hdr.Get("WWW-Authenticate"), r.body)
				}
			})
		}
		if rt.path == "/v1/events" {
			continue // a stream; its 200 is checked by the SSE tests
		}
		if r := rawDo(t, rt.method, url, "Authorization", "Bearer "+testToken); r.code == http.StatusUnauthorized {
			t.Errorf("%s %s with the token: 401", rt.method, rt.path)
		}
	}
	// Unknown paths do not tell an outsider what exists.
	if r := rawDo(t, "GET", e.srv.URL+"/v2/whatever"); r.code != http.StatusUnauthorized {
		t.Errorf("unknown path without a token: %d", r.code)
	}
}

// /metrics is open by default and needs the token with metrics_auth.
func TestMetricsAuth(t *testing.T) {
	e := newEnv(t, nil)
	if r := rawDo(t, "GET", e.srv.URL+"/metrics"); r.code != http.StatusOK {
		t.Fatalf("metrics without metrics_auth: %d", r.code)
	}
	s, err := New(e.sup, Options{Token: testToken, MetricsAuth: true, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if r := rawDo(t, "GET", srv.URL+"/metrics"); r.code != http.StatusUnauthorized {
		t.Fatalf("metrics with metrics_auth and no token: %d", r.code)
	}
	if r := rawDo(t, "GET", srv.URL+"/metrics", "Authorization", "Bearer "+testToken); r.code != http.StatusOK {
		t.Fatalf("metrics with metrics_auth and the token: %d", r.code)
	}
}

// A browser gets in only through the one-time link; its cookie counts only
// for the daemon's own page, and not after a rotation.
func TestBrowserLinkAndCookie(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"visible-only-inside"}`)
	host := strings.TrimPrefix(e.srv.URL, "http://")

	r := rawDo(t, "GET", e.srv.URL+"/")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), "agent-control-plane dashboard") || strings.Contains(string(r.body), "visible-only-inside") {
		t.Fatalf("page without a session: %d %s", r.code, r.body)
	}
	if r := rawDo(t, "GET", e.srv.URL+"/?token=wrong-token-0123456789"); r.code != http.StatusUnauthorized || r.hdr.Get("Set-Cookie") != "" {
		t.Fatalf("wrong link: %d %q", r.code, r.hdr.Get("Set-Cookie"))
	}
	r = rawDo(t, "GET", e.srv.URL+"/?token="+testToken)
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/" || r.hdr.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("link: %d location %q", r.code, r.hdr.Get("Location"))
	}
	set := r.hdr.Get("Set-Cookie")
	for _, want := range []string{SessionCookie + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Fatalf("cookie %q lacks %s", set, want)
		}
	}
	if strings.Contains(set, testToken) {
		t.Fatal("the cookie carries the token itself")
	}
	cookie := strings.SplitN(set, ";", 2)[0]

	cases := []struct {
		why  string
		hdr  []string
		want int
	}{
		{"the page's own request", nil, http.StatusOK},
		{"same origin", []string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}, http.StatusOK},
		{"another localhost page", []string{"Origin", "http://localhost:3000"}, http.StatusUnauthorized},
		{"same site, other port", []string{"Sec-Fetch-Site", "same-site"}, http.StatusUnauthorized},
		{"cross site", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusUnauthorized},
	}
	for _, c := range cases {
		r := rawDo(t, "GET", e.srv.URL+"/v1/sandboxes", append([]string{"Cookie", cookie}, c.hdr...)...)
		if r.code != c.want {
			t.Errorf("%s: %d, want %d", c.why, r.code, c.want)
		}
	}
	// With a session the page is the dashboard, under a strict policy;
	// without one it says how to get in, and its files hold no data.
	if r := rawDo(t, "GET", e.srv.URL+"/", "Cookie", cookie); !strings.Contains(string(r.body), `<script src="/ui/app.js"`) ||
		!strings.Contains(r.hdr.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("page with a session: %s", r.body)
	}
	if r := rawDo(t, "GET", e.srv.URL+"/"); strings.Contains(string(r.body), "app.js") || !strings.Contains(string(r.body), "agent-control-plane dashboard") {
		t.Fatalf("page without a session: %s", r.body)
	}
	for _, f := range []string{"app.js", "app.css"} {
		if r := rawDo(t, "GET", e.srv.URL+"/ui/"+f); r.code != http.StatusOK || len(r.body) < 1000 || r.hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("/ui/%s: %d, %d bytes", f, r.code, len(r.body))
		}
	}
	if r := rawDo(t, "GET", e.srv.URL+"/ui/index.html"); r.code != http.StatusNotFound || strings.Contains(string(r.body), "<script") {
		t.Fatalf("/ui/index.html: %d %s", r.code, r.body)
	}
	// Rotation ends the session and the old token.
	s, err := New(e.sup, Options{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if r := rawDo(t, "GET", srv.URL+"/v1/sandboxes", "Cookie", cookie); r.code != http.StatusOK {
		t.Fatalf("cookie before the rotation: %d", r.code)
	}
	if err := s.SetToken(testenv.NewToken()); err != nil {
		t.Fatal(err)
	}
	for _, h := range [][]string{{"Cookie", cookie}, {"Authorization", "Bearer " + testToken}} {
		if r := rawDo(t, "GET", srv.URL+"/v1/sandboxes", h...); r.code != http.StatusUnauthorized {
			t.Fatalf("%s after the rotation: %d", h[0], r.code)
		}
	}
	if err := s.SetToken("short"); err == nil {
		t.Fatal("a short token was accepted")
	}
}

func TestTokenCompare(t *testing.T) {
	tok := auth.New()
	if len(tok) != 64 || !auth.Equal(tok, tok) || auth.Equal(tok[:63], tok) || auth.Equal("", "") || auth.Equal(tok, "") {
		t.Fatal("token comparison")
	}
}
