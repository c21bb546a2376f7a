package api

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// A dashboard session cannot become the token: it gets nothing inside a
// native sandbox (whose processes could read the token file), may not
// set a sandbox's variables, and nothing the daemon answers with carries
// the token, whatever a workload prints. Before, `exec cat <token file>`
// with a session's secret answered the token.
func TestSessionCannotBecomeTheToken(t *testing.T) {
	e := newRealEnv(t, nil)
	e.toolbox("n1")
	secret := redeemCode(t, e.srv.URL)
	as := []string{"Authorization", "Bearer " + secret, "Content-Type", "application/json"}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes/n1/exec", `{"argv":["cat","/etc/hostname"]}`},
		{"GET", "/v1/sandboxes/n1/files?path=.", ""},
		{"GET", "/v1/sandboxes/n1/files/content?path=x", ""},
		{"POST", "/v1/sandboxes/n1/sessions", `{"name":"s"}`},
		{"POST", "/api/toolbox/n1/process/execute", `{"command":"true"}`},
		{"GET", "/api/toolbox/n1/files?path=.", ""},
		{"POST", "/api/toolbox/n1/process/session", `{"sessionId":"s"}`},
		{"GET", "/api/toolbox/n1/files/download?path=x", ""},
	} {
		r := e.do(c.method, c.path, c.body, as...)
		if r.code != 403 || !strings.Contains(string(r.body), "daemon's token") {
			t.Errorf("%s %s as a session: %d %s", c.method, c.path, r.code, r.body)
		}
	}
	// Reads of what the daemon shows everyone still work for a session.
	if r := e.do("GET", "/v1/sandboxes/n1", "", as...); r.code != 200 {
		t.Fatalf("get as a session: %d %s", r.code, r.body)
	}
	// A session may create, but not set variables.
	if r := e.do("POST", "/v1/sandboxes", `{"name":"s1"}`, as...); r.code != 201 {
		t.Fatalf("create as a session: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes", `{"name":"s2","envVars":{"NODE_OPTIONS":"--require /tmp/x.js"}}`, as...); r.code != 403 || r.errCode() != string(wire.CodeTokenRequired) {
		t.Fatalf("create with variables as a session: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/api/sandbox", `{"name":"s3","env":{"BASH_ENV":"/tmp/x"}}`, as...); r.code != 403 {
		t.Fatalf("/api create with variables as a session: %d %s", r.code, r.body)
	}
	// The token's holder: whatever prints the token gets it redacted.
	out, _ := e.execute("/api/toolbox/n1", `{"command":"echo `+testToken+`"}`)
	if strings.Contains(out.Result, testToken) || !strings.Contains(out.Result, "[REDACTED]") {
		t.Fatalf("the token in an exec's answer: %q", out.Result)
	}
	r := e.do("POST", "/v1/sandboxes/n1/exec", `{"argv":["sh","-c","echo `+testToken+`; echo acps_abcdefghijklmnopqrstuvwxyz >&2"]}`)
	var x wire.ExecResponse
	if json.Unmarshal(r.body, &x); strings.Contains(x.Stdout, testToken) || strings.Contains(x.Stderr, "acps_") {
		t.Fatalf("the token or a session secret in /v1's exec: %s", r.body)
	}
}

// GET /api/sandbox/{id} shows the variables' names alone, as /v1 does:
// values whose names or shapes the redactor would miss never come back.
func TestDaytonaShowsNoVariableValues(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do("POST", "/api/sandbox", `{"name":"v1","env":{"DB_PASS":"hunter2","SSH_PASSPHRASE":"open sesame","DATABASE_URL":"postgres://app:pw-in-url@db/x","STRIPE":"rk_live_51HabcdefGHIJKLMNOPqrs","PLAIN":"hello"}}`)
	if r.code != 200 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	for _, body := range []string{string(r.body), string(e.do("GET", "/api/sandbox/v1", "").body)} {
		for _, v := range []string{"hunter2", "open sesame", "pw-in-url", "rk_live_", "hello"} {
			if strings.Contains(body, v) {
				t.Fatalf("a value came back (%q): %s", v, body)
			}
		}
		var sb daytona.Sandbox
		json.Unmarshal([]byte(body), &sb)
		for _, k := range []string{"DB_PASS", "SSH_PASSPHRASE", "DATABASE_URL", "STRIPE", "PLAIN"} {
			if sb.Env[k] != "[REDACTED]" {
				t.Fatalf("%s: %s", k, body)
			}
		}
	}
}

// A bulk upload writes all its files or none, and counts every part: a
// form of path fields alone is refused past MaxBulkFiles (before, a
// 1 GiB body of them was held in memory), and a form whose 101st file,
// or whose third file's path, is refused leaves nothing written (before,
// the first 100 were).
func TestBulkUploadAllOrNothing(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("b1")
	ws := filepath.Join(e.sup.Root(), "b1", supervisor.WorkspaceDir)
	form := func(n int, bad int) []string {
		var f []string
		for i := range n {
			p := fmt.Sprintf("f%d.txt", i)
			if i == bad {
				p = "../outside.txt"
			}
			f = append(f, fmt.Sprintf("files[%d].path", i), p, fmt.Sprintf("files[%d].file", i), "content")
		}
		return f
	}
	for why, fields := range map[string][]string{
		"101 files":                 form(daytona.MaxBulkFiles+1, -1),
		"a third path that escapes": form(5, 2),
		"path fields alone": func() []string {
			var f []string
			for i := range 500 {
				f = append(f, fmt.Sprintf("files[%d].path", i), strings.Repeat("p", 4000))
			}
			return f
		}(),
		"an over-long path": {"files[0].path", strings.Repeat("p", 5000), "files[0].file", "x"},
	} {
		ct, body := multipartBody(t, fields...)
		if r := e.upload(base+"/files/bulk-upload", ct, body); r.code != 400 {
			t.Errorf("%s: %d %s", why, r.code, r.body)
		}
		if ents, _ := os.ReadDir(ws); len(ents) != 0 {
			t.Fatalf("%s: written: %d entries, the first %s", why, len(ents), ents[0].Name())
		}
	}
	os.WriteFile(filepath.Join(ws, "f0.txt"), []byte("old"), 0o600)
	ct, body := multipartBody(t, form(3, -1)...)
	if r := e.upload(base+"/files/bulk-upload", ct, body); r.code != 200 {
		t.Fatalf("a good form: %d %s", r.code, r.body)
	}
	ents, _ := os.ReadDir(ws)
	if len(ents) != 3 {
		t.Fatalf("after a good form: %v", ents)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "f0.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("a replaced file lost its mode: %v", fi.Mode())
	}
}

// The files' small edges: a NUL byte or the workspace itself as a file's
// name is the caller's mistake (400, not 500); chmod reaches only regular
// files and directories beneath the workspace; a FIFO is listed as one; a
// long name is cut in the message that quotes it.
func TestFileEdges(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("e1")
	ws := filepath.Join(e.sup.Root(), "e1", supervisor.WorkspaceDir)
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	ct, body := multipartBody(t, "file", "x")
	if r := e.upload(base+"/files/upload?path=.", ct, body); r.code != 400 {
		t.Errorf("upload to .: %d %s", r.code, r.body)
	}
	if r := e.do("GET", base+"/files/info?path=a%00b", ""); r.code != 400 {
		t.Errorf("a NUL byte: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/v1/sandboxes/e1/files/content?path=a%00b", ""); r.code != 400 {
		t.Errorf("a NUL byte on /v1: %d %s", r.code, r.body)
	}
	for _, p := range []string{"pipe", "."} {
		if r := e.do("POST", base+"/files/permissions?path="+p+"&mode=0777", ""); r.code != 400 {
			t.Errorf("chmod %s: %d %s", p, r.code, r.body)
		}
	}
	if fi, _ := os.Stat(ws); fi.Mode().Perm() == 0o777 {
		t.Fatal("the workspace was made 0777")
	}
	r := e.do("GET", "/v1/sandboxes/e1/files?path=.", "")
	var list wire.FileList
	if json.Unmarshal(r.body, &list); len(list.Items) != 1 || list.Items[0].Type != "fifo" {
		t.Fatalf("the FIFO listed as: %s", r.body)
	}
	long := "/elsewhere/" + strings.Repeat("x", 40000)
	if r := e.do("GET", base+"/files/info?path="+long, ""); r.code != 400 || len(r.body) > 2000 {
		t.Fatalf("a 40 KB path: %d, %d bytes of answer", r.code, len(r.body))
	}
}
