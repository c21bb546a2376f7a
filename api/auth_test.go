package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-control-plane/agent-control-plane/api/signin"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
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
				if rt.access == open {
					if r.code == http.StatusUnauthorized && r.errCode() == "unauthorized" {
						t.Fatalf("an open route asked for the token: %d %s", r.code, r.body)
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
	s, err := New(e.sup, Options{Daytona: e.sup, Token: testToken, MetricsAuth: true, Registry: prometheus.NewRegistry()})
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

// redeemCode makes a link with the token and trades it for a session,
// returning the session's secret.
func redeemCode(t *testing.T, url string) string {
	t.Helper()
	code := newCode(t, url)
	r := rawPost(t, url+"/v1/dashboard/sessions", `{"code":"`+code+`"}`)
	var s wire.DashboardSession
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &s) != nil || !strings.HasPrefix(s.Secret, signin.SecretPrefix) {
		t.Fatalf("redeem: %d %s", r.code, r.body)
	}
	return s.Secret
}

func newCode(t *testing.T, url string) string {
	t.Helper()
	r := rawPost(t, url+"/v1/dashboard/links", "", "Authorization", "Bearer "+testToken)
	var l wire.DashboardLink
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &l) != nil || len(l.Code) < 32 {
		t.Fatalf("link: %d %s", r.code, r.body)
	}
	return l.Code
}

func rawPost(t *testing.T, url, body string, hdr ...string) resp {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

// The dashboard's page holds no data and is served to anyone; a browser
// gets a session only by trading a one-time code, and the session is a
// bearer secret: no cookie ever counts, with or without browser headers.
func TestDashboardSignIn(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"visible-only-inside"}`)
	host := strings.TrimPrefix(e.srv.URL, "http://")

	r := rawDo(t, "GET", e.srv.URL+"/")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), "agent-control-plane dashboard") ||
		strings.Contains(string(r.body), "visible-only-inside") || !strings.Contains(r.hdr.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("the page: %d %s", r.code, r.body)
	}
	if r.hdr.Get("Set-Cookie") != "" {
		t.Fatalf("the page sets a cookie: %q", r.hdr.Get("Set-Cookie"))
	}
	// The old link form, with the token in the query, is refused.
	if r := rawDo(t, "GET", e.srv.URL+"/?token="+testToken); r.code != http.StatusBadRequest || r.hdr.Get("Set-Cookie") != "" {
		t.Fatalf("token link: %d %q", r.code, r.hdr.Get("Set-Cookie"))
	}
	if r := rawPost(t, e.srv.URL+"/v1/dashboard/links", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("a link without the token: %d", r.code)
	}

	// A code works once, and only from the daemon's own origin.
	code := newCode(t, e.srv.URL)
	body := `{"code":"` + code + `"}`
	if r := rawPost(t, e.srv.URL+"/v1/dashboard/sessions", body, "Origin", "http://127.0.0.1:3000"); r.code != http.StatusForbidden {
		t.Fatalf("redeem from another port's page: %d %s", r.code, r.body)
	}
	r = rawPost(t, e.srv.URL+"/v1/dashboard/sessions", body, "Origin", "http://"+host, "User-Agent", "test\tbrowser")
	var sess wire.DashboardSession
	if r.code != http.StatusCreated || json.Unmarshal(r.body, &sess) != nil || sess.Secret == "" || strings.Contains(sess.Secret, testToken) {
		t.Fatalf("redeem: %d %s", r.code, r.body)
	}
	if r := rawPost(t, e.srv.URL+"/v1/dashboard/sessions", body); r.code != http.StatusUnauthorized || r.errCode() != "invalid_code" {
		t.Fatalf("the same code again: %d %s", r.code, r.body)
	}
	bearer := "Bearer " + sess.Secret
	if r := rawDo(t, "GET", e.srv.URL+"/v1/sandboxes", "Authorization", bearer); r.code != http.StatusOK || !strings.Contains(string(r.body), "visible-only-inside") {
		t.Fatalf("the session's secret: %d %s", r.code, r.body)
	}
	// What a page on another loopback port could have received: no
	// cookie counts, with or without the headers a browser adds.
	for _, c := range []string{"acp_session=" + sess.Secret, "acp_session=" + testToken, "session=" + sess.Secret} {
		for _, hdr := range [][]string{nil, {"Sec-Fetch-Site", "same-origin", "Origin", "http://" + host}, {"Sec-Fetch-Site", "none"}} {
			if r := rawDo(t, "GET", e.srv.URL+"/v1/sandboxes", append([]string{"Cookie", c}, hdr...)...); r.code != http.StatusUnauthorized {
				t.Errorf("cookie %q with %v: %d", c[:12], hdr, r.code)
			}
		}
	}
	// A session cannot make links (it would outlive its expiry).
	if r := rawPost(t, e.srv.URL+"/v1/dashboard/links", "", "Authorization", bearer); r.code != http.StatusForbidden || r.errCode() != "token_required" {
		t.Fatalf("a link made by a session: %d %s", r.code, r.body)
	}
	// Listed (its own marked current, the browser name kept printable),
	// and revoked.
	r = rawDo(t, "GET", e.srv.URL+"/v1/dashboard/sessions", "Authorization", bearer)
	var list wire.DashboardSessionList
	if json.Unmarshal(r.body, &list) != nil || len(list.Items) != 1 || !list.Items[0].Current || list.Items[0].UserAgent != "testbrowser" || list.Items[0].Secret != "" {
		t.Fatalf("sessions: %s", r.body)
	}
	if r := rawDo(t, "DELETE", e.srv.URL+"/v1/dashboard/sessions/"+sess.ID, "Authorization", "Bearer "+testToken); r.code != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.code, r.body)
	}
	if r := rawDo(t, "GET", e.srv.URL+"/v1/sandboxes", "Authorization", bearer); r.code != http.StatusUnauthorized {
		t.Fatalf("a revoked session: %d", r.code)
	}
	if r := rawDo(t, "DELETE", e.srv.URL+"/v1/dashboard/sessions/"+sess.ID, "Authorization", "Bearer "+testToken); r.code != http.StatusNotFound {
		t.Fatalf("revoke again: %d", r.code)
	}
	// Revoke all.
	a, b := redeemCode(t, e.srv.URL), redeemCode(t, e.srv.URL)
	if r := rawDo(t, "DELETE", e.srv.URL+"/v1/dashboard/sessions", "Authorization", "Bearer "+a); r.code != http.StatusNoContent {
		t.Fatalf("revoke all: %d", r.code)
	}
	for _, s := range []string{a, b} {
		if r := rawDo(t, "GET", e.srv.URL+"/v1/sandboxes", "Authorization", "Bearer "+s); r.code != http.StatusUnauthorized {
			t.Fatalf("after revoke all: %d", r.code)
		}
	}
}

// Sessions end at their expiry and at a token rotation; codes after a
// minute; they survive a restart with the same token, and the file keeps
// no secret; what an outsider can make the store keep is bounded.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestDashboardSessionLifetime(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	// Kept as the daemon keeps them: in its root, through the supervisor.
	file := filepath.Join(e.sup.Root(), supervisor.SignInsFile)
	start := func(token string) (*Server, string) {
		s, err := New(e.sup, Options{Daytona: e.sup, Token: token, SignIns: e.sup, SignInTTL: time.Hour, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return s, srv.URL
	}
	ok := func(url, secret string) bool {
		return rawDo(t, "GET", url+"/v1/sandboxes", "Authorization", "Bearer "+secret).code == http.StatusOK
	}

	s1, url1 := start(testToken)
	secret := redeemCode(t, url1)
	advance(59 * time.Minute)
	if !ok(url1, secret) {
		t.Fatal("a session before its expiry was refused")
	}
	// A restart keeps it; the file holds a hash, never the secret.
	_, url2 := start(testToken)
	if !ok(url2, secret) {
		t.Fatal("the session did not survive a restart")
	}
	raw, _ := os.ReadFile(file)
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 || len(raw) == 0 || strings.Contains(string(raw), secret) || strings.Contains(string(raw), testToken) {
		t.Fatalf("sessions file: %v, %s", err, raw)
	}
	advance(2 * time.Minute)
	if ok(url2, secret) {
		t.Fatal("an expired session was accepted")
	}
	// A code lasts a minute.
	code := newCode(t, url2)
	advance(signin.CodeTTL + time.Second)
	if r := rawPost(t, url2+"/v1/dashboard/sessions", `{"code":"`+code+`"}`); r.code != http.StatusUnauthorized {
		t.Fatalf("an expired code: %d", r.code)
	}
	// Rotation ends every session, in this daemon and in the file.
	secret = redeemCode(t, url1)
	other := testenv.NewToken()
	if err := s1.SetToken(other); err != nil {
		t.Fatal(err)
	}
	if ok(url1, secret) {
		t.Fatal("a session survived the rotation")
	}
	if _, url3 := start(testToken); ok(url3, secret) {
		t.Fatal("a session made before a rotation came back from the file")
	}
	if err := s1.SetToken("short"); err == nil {
		t.Fatal("a short token was accepted")
	}

	// Bounds: codes waiting, and sessions kept.
	_, url4 := start(testToken)
	for i := 0; i < signin.MaxCodes; i++ {
		newCode(t, url4)
	}
	if r := rawPost(t, url4+"/v1/dashboard/links", "", "Authorization", "Bearer "+testToken); r.code != http.StatusTooManyRequests {
		t.Fatalf("link past the bound: %d", r.code)
	}
	advance(signin.CodeTTL + time.Second)
	first := redeemCode(t, url4)
	for range signin.MaxSignIns {
		advance(time.Second) // so that first is the least recently used
		redeemCode(t, url4)
	}
	r := rawDo(t, "GET", url4+"/v1/dashboard/sessions", "Authorization", "Bearer "+testToken)
	var list wire.DashboardSessionList
	if json.Unmarshal(r.body, &list) != nil || len(list.Items) != signin.MaxSignIns {
		t.Fatalf("sessions kept past the bound: %d", len(list.Items))
	}
	if ok(url4, first) {
		t.Fatal("the least recently used session was kept past the bound")
	}
}

func TestTokenCompare(t *testing.T) {
	tok := auth.New()
	if len(tok) != 64 || !auth.Equal(tok, tok) || auth.Equal(tok[:63], tok) || auth.Equal("", "") || auth.Equal(tok, "") {
		t.Fatal("token comparison")
	}
}
