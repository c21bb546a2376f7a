package daytona

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// PreviewPath is where previews are served: PreviewPath/{id}/{port}/…
// reaches port of sandbox id, path and query kept. It is outside /api
// (what it serves is the workload's, not Daytona's API).
const PreviewPath = "/preview"

// PreviewTokenHeader carries a preview's token, as on Daytona.
const PreviewTokenHeader = "X-Daytona-Preview-Token"

// previewCSP is sent with every preview answer: the page runs in an
// opaque origin of its own, not the daemon's, so that a workload's page
// can neither read what the dashboard keeps in its origin's storage nor
// call the daemon's API in its name.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// SetPreviewCSP puts the preview's policy on an answer: every answer
// under PreviewPath carries it, the daemon's own (errors, redirects) too.
func SetPreviewCSP(w http.ResponseWriter) { w.Header().Set("Content-Security-Policy", previewCSP) }

// hopHeader marks a request the preview has forwarded, with a value of
// this daemon's own: one that comes back (a workload that forwards to
// the daemon) is refused, whatever port it came through.
const hopHeader = "Acp-Preview-Hop"

// previewURL answers Daytona's PortPreviewUrl for any port of a running
// sandbox: a URL on this daemon that reaches it, and the token that URL
// wants (unless the sandbox is public).
func (a *API) previewURL(w http.ResponseWriter, r *http.Request) {
	port, ok := portParam(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	sb, err := a.sup.Get(id)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	// The URL is good before anything listens on the port (a client asks
	// for it, then starts its server).
	if _, err := a.sup.PortEndpoint(r.Context(), id, workloadPort(sb, port)); err != nil && !errors.Is(err, runtime.ErrNotListening) {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, PortPreviewURL{
		SandboxID: sb.ID, Token: a.opts.PreviewToken(sb),
		URL: "http://" + r.Host + PreviewPath + "/" + url.PathEscape(sb.ID) + "/" + strconv.Itoa(port),
	})
}

func portParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		badRequest(w, r, "port must be a TCP port, 1 to 65535")
		return 0, false
	}
	return port, true
}

// previewProxy forwards preview traffic to the workload. It never counts
// as activity: the idle clock is fed by keep-alives alone.
type previewProxy struct {
	a     *API
	proxy *httputil.ReverseProxy
	hop   string // this daemon's hopHeader value
}

type targetKey struct{}

// dialKey carries a preview request's dialTarget to the transport.
type dialKey struct{}

type dialTarget struct {
	id   string
	port int
}

// poolHost is the host of a preview's target URL: one per sandbox, so
// that pooled connections to one sandbox's port never serve another's.
func poolHost(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "s" + hex.EncodeToString(sum[:12]) + ".sandbox.invalid"
}

// AgentPort is the port of a Daytona sandbox's agent. A sandbox that
// shares the host's network serves its agent on its leased port instead:
// a preview of AgentPort reaches that (what /v1 calls its port).
const AgentPort = 4000

// workloadPort is port as sb's workload listens on it: its agent's port
// by either of its numbers (4000, or the leased port /v1 shows). Inside
// a sandbox of its own network (isolated, a container) the agent is on
// 4000; one that shares the host's serves it on the leased port.
func workloadPort(sb supervisor.Sandbox, port int) int {
	switch {
	case sb.Port == 0:
	case sb.Isolation == runtime.IsolationNamespaces && port == sb.Port:
		return AgentPort
	case sb.Isolation != runtime.IsolationNamespaces && port == AgentPort:
		return sb.Port
	}
	return port
}

func newPreviewProxy(a *API) *previewProxy {
	tr := &http.Transport{
		// Every connection is dialled through the supervisor, which
		// reaches a port as the sandbox's workload listens on it (an
		// isolated sandbox's network is its own); the target's host
		// names the sandbox and port only to keep pooled connections
		// apart.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t := ctx.Value(dialKey{}).(dialTarget)
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return a.sup.DialPort(ctx, t.id, t.port)
		},
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p := &previewProxy{a: a, hop: rand.Text()}
	p.proxy = &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.SetURL(target)
			// The path as it was received, escapes and all: the
			// workload decodes it as it would its own.
			pr.Out.URL.RawPath = pr.In.Context().Value(restKey{}).(string)
			pr.Out.URL.Path, _ = url.PathUnescape(pr.Out.URL.RawPath)
			pr.Out.Host = "127.0.0.1:" + target.Port() // the port as the workload listens on it
			pr.SetXForwarded()
			pr.Out.Header.Set(hopHeader, p.hop)
			// The daemon's credentials stay with the daemon, in any
			// header, however many.
			pr.Out.Header.Del(PreviewTokenHeader)
			stripCredentials(pr.Out.Header, a.opts.Credential)
		},
		ModifyResponse: func(res *http.Response) error {
			res.Header.Del("Content-Security-Policy") // the answer gets the preview's (SetPreviewCSP)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			WriteError(w, r, http.StatusBadGateway, "the sandbox's port did not answer: "+err.Error())
		},
	}
	return p
}

// stripCredentials drops every header value that holds one of the
// daemon's credentials.
func stripCredentials(h http.Header, credential func(string) bool) {
	for k, vs := range h {
		kept := vs[:0]
		for _, v := range vs {
			if credential == nil || !credential(v) {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			delete(h, k)
		} else {
			h[k] = kept
		}
	}
}

type restKey struct{}

// Preview serves PreviewPath/{id}/{port}/{rest...} (and without the last
// slash, redirected to it). A sandbox that does not exist answers as one
// the caller may not see, unless the caller holds the token.
func (a *API) Preview(w http.ResponseWriter, r *http.Request) {
	SetPreviewCSP(w)
	if r.Header.Get(hopHeader) == a.preview.hop {
		WriteError(w, r, http.StatusLoopDetected, "this preview request has come back to the daemon that forwarded it")
		return
	}
	port, ok := portParam(w, r)
	if !ok {
		return
	}
	owner := a.opts.Authorized(r)
	sb, err := a.sup.Get(r.PathValue("id"))
	if err != nil && (owner || !errors.Is(err, supervisor.ErrNotFound)) {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	if err != nil || !sb.Public && !owner && subtle.ConstantTimeCompare([]byte(r.Header.Get(PreviewTokenHeader)), []byte(a.opts.PreviewToken(sb))) != 1 {
		WriteError(w, r, http.StatusUnauthorized, "this preview needs its token in the "+PreviewTokenHeader+" header (preview-url gives it), or the sandbox made public")
		return
	}
	prefix := PreviewPath + "/" + r.PathValue("id") + "/" + r.PathValue("port")
	rest, ok := escapedRest(r.URL.EscapedPath(), prefix)
	if !ok {
		WriteError(w, r, http.StatusBadRequest, "the preview's path must begin "+PreviewPath+"/{sandbox}/{port}/")
		return
	}
	if rest == "" {
		to := r.URL.EscapedPath() + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusPermanentRedirect)
		return
	}
	port = workloadPort(sb, port)
	_, err = a.sup.PortEndpoint(r.Context(), sb.ID, port)
	switch {
	case errors.Is(err, supervisor.ErrNotRunning):
		WriteError(w, r, http.StatusConflict, err.Error())
		return
	case errors.Is(err, runtime.ErrNotListening):
		WriteError(w, r, http.StatusBadGateway, "the sandbox's port did not answer: "+err.Error())
		return
	case err != nil:
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort(poolHost(sb.ID), strconv.Itoa(port))}
	ctx := context.WithValue(context.WithValue(r.Context(), targetKey{}, target), restKey{}, rest)
	ctx = context.WithValue(ctx, dialKey{}, dialTarget{id: sb.ID, port: port})
	a.preview.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// escapedRest is the escaped path after prefix (whose segments are
// matched decoded, as the mux matched them): "" when nothing follows,
// "/…" otherwise.
func escapedRest(escaped, prefix string) (string, bool) {
	segs := strings.Count(prefix, "/")
	i, n := 0, 0
	for ; i < len(escaped) && n <= segs; i++ {
		if escaped[i] == '/' {
			n++
			if n > segs {
				break
			}
		}
	}
	if n <= segs {
		return "", true // nothing after the port, not even a slash
	}
	head, err := url.PathUnescape(escaped[:i])
	if err != nil || head != prefix {
		return "", false
	}
	return escaped[i:], true
}
