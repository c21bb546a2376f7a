package host

import (
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// Access says who may call a route.
type Access int

const (
	Member    Access = iota // the token or a dashboard session
	Open                    // anyone (the guard's other checks still apply)
	TokenOnly               // the token itself, never a dashboard session
	// Inside reaches into a sandbox (commands, files, shell sessions):
	// the token, or a dashboard session where the sandbox is confined
	// (Options.Confined). A workload that is not (a native sandbox,
	// running as the daemon's user) can read the token file: a session
	// that could run commands there could become the token.
	Inside
)

// Body is the request body a route takes.
type Body int

const (
	// JSON: application/json, at most wire.MaxBodyBytes, arriving within
	// Options.BodyTimeout.
	JSON Body = iota
	// Multipart, Octet and Tar are uploads (multipart/form-data, a
	// file's bytes, a tar stream): their handler bounds them, and they
	// get UploadDeadline to arrive. A form post from another site has no
	// bearer token: it is refused before its body is looked at.
	Multipart
	Octet
	Tar
)

// UploadDeadline is how long an upload's body may take to arrive.
const UploadDeadline = 30 * time.Minute

func (b Body) mediaType() string {
	switch b {
	case Multipart:
		return "multipart/form-data"
	case Octet:
		return "application/octet-stream"
	case Tar:
		return "application/x-tar"
	}
	return "application/json"
}

// Route is one operation of a face.
type Route struct {
	Method, Path string
	Handler      http.HandlerFunc
	Mutates      bool // logged when it succeeds
	Access       Access
	Body         Body
	// Quiet routes are not counted in the HTTP metrics (the dashboard's
	// page and files, /metrics itself).
	Quiet bool
}

// Face is one API the host serves.
type Face struct {
	// Prefixes are the paths the face answers under (a path equal to
	// one, or below it): an error there that no route of the face
	// answers (a host refused, no such route) is in its shape.
	Prefixes []string
	Routes   []Route
	// Fail writes an error in the face's shape.
	Fail func(w http.ResponseWriter, r *http.Request, code wire.ErrorCode, msg string)
	// Raw are handlers by pattern served outside the guard: they check
	// what they need themselves (a preview takes its own token).
	Raw map[string]http.Handler
}

func byPath(all []Route) map[string]map[string]Route {
	out := map[string]map[string]Route{}
	for _, rt := range all {
		if out[rt.Path] == nil {
			out[rt.Path] = map[string]Route{}
		}
		out[rt.Path][rt.Method] = rt
	}
	return out
}

// dispatch serves one path of face f. Every request passes the guard
// first: it is answered only when addressed to a loopback host (a
// DNS-rebinding page names its own host), a cross-site browser request
// (an Origin other than a localhost one) is refused, the query must be
// readable and bounded, and every route but the open ones needs the
// bearer token (or a dashboard session's secret). Then the route is
// picked by method (405 with Allow otherwise), its body must be of its
// type (so that a simple form post from another site cannot pass) and
// bounded, its access is checked, and it is served, with metrics under
// its pattern and a log line for a change. A path no route has (methods
// nil) answers 404, in the shape of the face it is under.
func (s *Server) dispatch(f Face, path string, methods map[string]Route) http.Handler {
	var allow []string
	for m := range methods {
		allow = append(allow, m)
	}
	slices.Sort(allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := s.Fail
		if f.Fail != nil {
			fail = f.Fail
		}
		if !s.AllowedHost(r.Host) {
			fail(w, r, wire.CodeForbiddenHost, "host "+Quote(r.Host)+" is not allowed; use 127.0.0.1 or localhost")
			return
		}
		if cors(w, r, fail) {
			return
		}
		if err := checkQuery(r.URL.RawQuery); err != nil {
			fail(w, r, wire.CodeInvalidRequest, err.Error())
			return
		}
		rt, found := methods[r.Method]
		if !found && r.Method == http.MethodHead {
			rt, found = methods[http.MethodGet]
		}
		who, ok := s.Authorize(r)
		if !ok && !(found && rt.Access == Open) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agent-control-plane"`)
			fail(w, r, wire.CodeUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>; the CLI and the Go client read it from $"+auth.TokenEnv+" or the token file (default ~/.local/state/agent-control-plane/token)")
			return
		}
		if methods == nil {
			fail(w, r, wire.CodeNotFound, "no route "+Quote(r.URL.Path))
			return
		}
		if !found {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			fail(w, r, wire.CodeMethodNotAllowed, r.Method+" is not allowed on "+path)
			return
		}
		if !s.body(w, r, rt.Body, fail) {
			return
		}
		if rt.Access == TokenOnly && who.SignIn != "" {
			fail(w, r, wire.CodeTokenRequired, r.Method+" "+path+" needs the daemon's token; a dashboard session may not call it")
			return
		}
		if rt.Access == Inside && who.SignIn != "" && s.opts.Confined != nil {
			if confined, err := s.opts.Confined(r.PathValue("id")); err == nil && !confined {
				fail(w, r, wire.CodeTokenRequired, "a dashboard session may not reach inside "+Quote(r.PathValue("id"))+": its processes run as the daemon's user and can read the daemon's token; use the CLI, which holds the token")
				return
			}
		}
		r = r.WithContext(withCaller(r.Context(), who))
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		start := time.Now()
		rt.Handler(rec, r)
		if s.metrics != nil && !rt.Quiet {
			stream := rec.Header().Get("Content-Type") == "text/event-stream"
			s.metrics.observe(rt.Method+" "+path, rec.code, time.Since(start), stream)
		}
		if rt.Mutates && rec.code < 300 {
			s.log.Info("request", "method", r.Method, "route", path, "id", r.PathValue("id"), "status", rec.code, "by", who.String())
		}
	})
}

// body checks that a request's body is of the route's type and bounds
// it; it answers and reports false when it is not.
func (s *Server) body(w http.ResponseWriter, r *http.Request, b Body, fail func(http.ResponseWriter, *http.Request, wire.ErrorCode, string)) bool {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != b.mediaType() {
		if b == JSON {
			fail(w, r, wire.CodeUnsupportedMediaType, "a request with a body must have Content-Type: application/json")
		} else {
			fail(w, r, wire.CodeUnsupportedMediaType, "an upload here must have Content-Type: "+b.mediaType())
		}
		return false
	}
	rc := http.NewResponseController(w)
	if b != JSON {
		_ = rc.SetReadDeadline(time.Now().Add(UploadDeadline))
		return true
	}
	r.Body = http.MaxBytesReader(w, r.Body, wire.MaxBodyBytes)
	// The body must arrive in time; the header already had to
	// (ReadHeaderTimeout). Streams have no body and keep no read
	// deadline.
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	return true
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	written bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.written {
		r.code, r.written = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.written = true
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
