package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"net/http"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/host"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// newDaytona builds Daytona's API at /api over sup (the supervisor as its
// face declares it), with the server's error mapping, token and machine.
func (s *Server) newDaytona(sup daytona.Supervisor) *daytona.API {
	return daytona.New(sup, daytona.Options{
		Version: s.opts.Version, Started: s.startedAt, Root: s.sup.Root(), User: currentUser(), Machine: machine(s.sup.Root()),
		Fail: func(w http.ResponseWriter, r *http.Request, err error, fail wire.ErrorCode) {
			code, msg := s.host.CodeOf(err, fail)
			daytona.WriteError(w, r, code.Status(), msg)
		},
		PreviewToken: s.previewToken, MaxUpload: s.opts.MaxUpload,
		Authorized: func(r *http.Request) bool {
			who, ok := s.host.Authorize(r)
			return ok && who.Token
		},
		Credential: func(v string) bool { return s.host.HoldsCredential(v) },
	})
}

// daytonaFace is Daytona's /api (and its previews) for the host: its
// routes as Daytona's face declares them, in Daytona's error shape; a
// preview is served outside the guard (a workload's traffic is not the
// API's: any method, any body), but only to loopback hosts like the rest.
func (s *Server) daytonaFace(a *daytona.API) host.Face {
	var out []host.Route
	for _, rt := range a.Routes() {
		hr := host.Route{Method: rt.Method, Path: rt.Path, Handler: rt.Handler, Mutates: rt.Mutates, Access: host.Member}
		if rt.Inside {
			hr.Access = host.Inside
		}
		if rt.Upload {
			hr.Body = host.Multipart
		}
		out = append(out, hr)
	}
	fail := func(w http.ResponseWriter, r *http.Request, code wire.ErrorCode, msg string) {
		daytona.WriteError(w, r, code.Status(), msg)
	}
	preview := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		daytona.SetPreviewCSP(w)
		if !s.host.AllowedHost(r.Host) {
			fail(w, r, wire.CodeForbiddenHost, "host "+quote(r.Host)+" is not allowed; use 127.0.0.1 or localhost")
			return
		}
		a.Preview(w, r)
	})
	return host.Face{
		Prefixes: []string{daytona.Prefix, daytona.PreviewPath}, Routes: out, Fail: fail,
		Raw: map[string]http.Handler{daytona.PreviewPath + "/{id}/{port}": preview, daytona.PreviewPath + "/{id}/{port}/{rest...}": preview},
	}
}

// previewToken is a sandbox's preview token: an HMAC under the daemon's
// token of the sandbox's id and creation time, so a rotation ends every
// preview token and a new sandbox of the same name has another.
func (s *Server) previewToken(sb supervisor.Sandbox) string {
	m := hmac.New(sha256.New, []byte(s.host.Token()))
	m.Write([]byte("agent-control-plane preview\x00" + sb.ID + "\x00" + strconv.FormatInt(sb.CreatedAt.UnixNano(), 10)))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(m.Sum(nil)[:20]))
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}

// machine is what a sandbox without limits may use: this machine's CPUs
// and memory, and the size of the filesystem that holds the root.
func machine(root string) daytona.Machine {
	const gib = 1 << 30
	m := daytona.Machine{CPU: float64(runtime.NumCPU())}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		m.MemoryGiB = float64(uint64(si.Totalram)*uint64(si.Unit)) / gib
	}
	var st syscall.Statfs_t
	if syscall.Statfs(root, &st) == nil {
		m.DiskGiB = float64(st.Blocks*uint64(st.Bsize)) / gib
	}
	m.MemoryGiB, m.DiskGiB = float64(int64(m.MemoryGiB*100))/100, float64(int64(m.DiskGiB*100))/100
	return m
}
