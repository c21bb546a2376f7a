package host

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// Bounds of a request's query (the API's; a preview's goes to its
// workload as it is).
const (
	MaxQueryBytes  = 16 << 10
	MaxQueryParams = 64
)

// checkQuery refuses a query that cannot be read whole: one that does not
// parse (r.URL.Query drops what it cannot read, and a filter dropped
// answers everything), or past the bounds.
func checkQuery(raw string) error {
	if raw == "" {
		return nil
	}
	if len(raw) > MaxQueryBytes {
		return fmt.Errorf("the query is %d bytes; at most %d", len(raw), MaxQueryBytes)
	}
	if n := strings.Count(raw, "&") + strings.Count(raw, ";") + 1; n > MaxQueryParams {
		return fmt.Errorf("the query has %d parameters; at most %d", n, MaxQueryParams)
	}
	if _, err := url.ParseQuery(raw); err != nil {
		return fmt.Errorf("the query cannot be read: %v", err)
	}
	return nil
}

// cors answers a browser's cross-origin request: one from another site is
// refused, a localhost one is allowed and its preflight answered. It
// reports whether it answered.
func cors(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, *http.Request, wire.ErrorCode, string)) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	if !allowedOrigin(origin) {
		fail(w, r, wire.CodeForbiddenOrigin, "origin "+Quote(origin)+" is not allowed; only http://localhost:* and http://127.0.0.1:* may call this daemon")
		return true
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", "Content-Type")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, X-Daytona-Organization-ID, X-Daytona-Source, X-Daytona-SDK-Version")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// AllowedHost reports whether a Host header is exactly a host the daemon
// answers to (a loopback one, or one of AllowHosts) and, if it has one, a
// port: "127.0.0.1:4025.evil.example" is not, so nothing built from the
// Host header (preview and toolbox URLs) carries anything else.
func (s *Server) AllowedHost(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		} else if strings.Contains(host, ":") {
			return false
		}
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	}
	if auth.IsLoopbackHost(host) {
		return true
	}
	for _, a := range s.opts.AllowHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

func allowedOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Path != "" && u.Path != "/" {
		return false
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// Caller is who made a request: the holder of the token, or a dashboard
// session.
type Caller struct {
	Token  bool
	SignIn string // the sign-in's id
}

func (c Caller) String() string {
	switch {
	case c.Token:
		return "token"
	case c.SignIn != "":
		return "session " + c.SignIn
	}
	return "anonymous"
}

type callerKey struct{}

func withCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is who made the request a route serves.
func CallerOf(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Authorize reads the request's bearer credential: the daemon's token, or
// a dashboard session's secret. Both are compared in constant time (a
// session is looked up by the hash of what was presented). Nothing else
// counts: no cookie, whatever headers come with it, because a cookie for
// 127.0.0.1 reaches every port of it.
func (s *Server) Authorize(r *http.Request) (Caller, bool) {
	h := r.Header.Get("Authorization")
	scheme, presented, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Caller{}, false
	}
	presented = strings.TrimSpace(presented)
	if auth.Equal(presented, s.Token()) {
		return Caller{Token: true}, true
	}
	if sess, ok := s.signins.Check(presented); ok {
		return Caller{SignIn: sess.ID}, true
	}
	return Caller{}, false
}

// Quote quotes a caller's input for an error message, at most
// supervisor.MaxQuoted bytes of it.
func Quote(s string) string { return strconv.Quote(supervisor.Clip(s, supervisor.MaxQuoted)) }
