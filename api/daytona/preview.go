package daytona

import (
	"context"
	"crypto/subtle"
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

// previewURL answers Daytona's PortPreviewUrl for any port of a running
// sandbox: a URL on this daemon that reaches it, and the token that URL
// wants (unless the sandbox is public).
func (a *API) previewURL(w http.ResponseWriter, r *http.Request) {
	port, ok := portParam(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := a.sup.PortEndpoint(r.Context(), id, port); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	sb, err := a.sup.Get(id)
	if err != nil {
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
}

type targetKey struct{}

func newPreviewProxy(a *API) *previewProxy {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p := &previewProxy{a: a}
	p.proxy = &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+pr.In.PathValue("rest"), ""
			pr.Out.Host = target.Host
			pr.SetXForwarded()
			// The daemon's credentials stay with the daemon.
			pr.Out.Header.Del(PreviewTokenHeader)
			if a.opts.Authorized(pr.In) {
				pr.Out.Header.Del("Authorization")
			}
		},
		ModifyResponse: func(res *http.Response) error {
			res.Header.Set("Content-Security-Policy", previewCSP)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			WriteError(w, r, http.StatusBadGateway, "the sandbox's port did not answer: "+err.Error())
		},
	}
	return p
}

// Preview serves PreviewPath/{id}/{port}/{rest...} (and without the last
// slash, redirected to it).
func (a *API) Preview(w http.ResponseWriter, r *http.Request) {
	port, ok := portParam(w, r)
	if !ok {
		return
	}
	sb, err := a.sup.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	if !sb.Public && !a.opts.Authorized(r) {
		want := a.opts.PreviewToken(sb)
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(PreviewTokenHeader)), []byte(want)) != 1 {
			WriteError(w, r, http.StatusUnauthorized, "this preview needs its token in the "+PreviewTokenHeader+" header (preview-url gives it), or the sandbox made public")
			return
		}
	}
	if r.PathValue("rest") == "" && !strings.HasSuffix(r.URL.Path, "/") {
		to := r.URL.EscapedPath() + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusPermanentRedirect)
		return
	}
	ep, err := a.sup.PortEndpoint(r.Context(), sb.ID, port)
	if err != nil {
		if errors.Is(err, supervisor.ErrNotRunning) {
			WriteError(w, r, http.StatusConflict, err.Error())
			return
		}
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	target, _ := url.Parse(ep.URL(""))
	a.preview.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target)))
}
