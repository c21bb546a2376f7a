package api

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/api/daytona"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// tb is a running sandbox's toolbox base.
func (e *env) toolbox(name string) string {
	e.t.Helper()
	if r := e.do("POST", "/api/sandbox", `{"name":"`+name+`","env":{"SERVICE_TOKEN":"tok-abcdef123456"}}`); r.code != 200 {
		e.t.Fatalf("create: %d %s", r.code, r.body)
	}
	e.dwait(name, "started")
	return "/api/toolbox/" + name
}

func (e *env) execute(base, body string) (daytona.ExecuteResponse, resp) {
	e.t.Helper()
	r := e.do("POST", base+"/process/execute", body)
	var out daytona.ExecuteResponse
	json.Unmarshal(r.body, &out)
	return out, r
}

func TestToolboxExecute(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("x1")
	ws := filepath.Join(e.sup.Root(), "x1", supervisor.WorkspaceDir)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)

	out, r := e.execute(base, `{"command":"sh -c 'echo $GREETING; pwd; echo oops >&2; exit 3'","cwd":"sub","envs":{"GREETING":"hi there"}}`)
	if r.code != 200 || out.ExitCode != 3 || out.Result != "hi there\n"+filepath.Join(ws, "sub")+"\noops\n" {
		t.Fatalf("execute: %d %s", r.code, r.body)
	}
	// The sandbox's own environment, and nothing that waits on a prompt.
	out, _ = e.execute(base, `{"command":"sh -c 'echo $AGENT_SANDBOX_ID $GIT_TERMINAL_PROMPT'"}`)
	if out.Result != "x1 0\n" {
		t.Fatalf("environment: %q", out.Result)
	}
	// Output is redacted as the sandbox's logs are.
	if out, _ := e.execute(base, `{"command":"sh -c 'echo token=$SERVICE_TOKEN'"}`); out.Result != "token=[REDACTED]\n" {
		t.Fatalf("a secret in the output: %q", out.Result)
	}
	if r := e.do("POST", "/v1/sandboxes/x1/exec", `{"argv":["sh","-c","echo $SERVICE_TOKEN >&2"]}`); strings.Contains(string(r.body), "tok-abc") {
		t.Fatalf("a secret in /v1's output: %s", r.body)
	}
	// The command goes to the sandbox's shell, as Daytona's toolbox
	// sends it: its syntax, its exit codes.
	for _, c := range []struct {
		command, result string
		code            int
	}{
		{"echo a && echo b", "a\nb\n", 0},
		{"echo a; false; echo $?", "a\n1\n", 0},
		{"echo hi | tr a-z A-Z", "HI\n", 0},
		{"exit 1", "", 1},
		{"cat <<'EOF'\nkept $HOME as written\nEOF", "kept $HOME as written\n", 0},
		{"x=1\ny=2\necho $((x+y))", "3\n", 0},
	} {
		body, _ := json.Marshal(map[string]string{"command": c.command})
		if out, r := e.execute(base, string(body)); r.code != 200 || out.ExitCode != c.code || out.Result != c.result {
			t.Errorf("%q: %d %s, want exit %d and %q", c.command, r.code, r.body, c.code, c.result)
		}
	}
	if out, r := e.execute(base, `{"command":"no-such-program-here"}`); r.code != 200 || out.ExitCode != 127 || !strings.Contains(out.Result, "no-such-program-here") {
		t.Fatalf("missing program: %d %s", r.code, r.body)
	}
	if out, r := e.execute(base, `{"command":"echo 'open"}`); r.code != 200 || out.ExitCode == 0 || out.Result == "" {
		t.Fatalf("a line the shell cannot read: %d %s", r.code, r.body)
	}
	// Stdin is closed: a command that reads it ends.
	if out, _ := e.execute(base, `{"command":"cat"}`); out.ExitCode != 0 || out.Result != "" {
		t.Fatalf("cat with no input: %+v", out)
	}
	if _, r := e.execute(base, `{"command":"sleep 30","timeout":1}`); r.code != http.StatusRequestTimeout || !strings.Contains(string(r.body), "timeout") {
		t.Fatalf("timeout: %d %s", r.code, r.body)
	}
	for _, bad := range []string{`{"command":""}`, `{"command":"  "}`, `{"command":"true","timeout":-1}`, `{"command":"true","envs":{"A=B":"x"}}`, `{}`} {
		if _, r := e.execute(base, bad); r.code != 400 {
			t.Errorf("%s: %d %s", bad, r.code, r.body)
		}
	}
	// Too much output keeps the tail and says so.
	out, _ = e.execute(base, `{"command":"sh -c 'head -c 3000000 /dev/zero | tr \"\\\\0\" x; echo; echo last'"}`)
	if !strings.HasPrefix(out.Result, "[output cut") || !strings.HasSuffix(out.Result, "\nlast\n") || len(out.Result) > supervisor.MaxRunOutput+100 {
		t.Fatalf("big output: %d bytes, %q…", len(out.Result), out.Result[:min(40, len(out.Result))])
	}
}

// Past the per-sandbox bound a command is refused at once (429), and the
// daemon serves on.
func TestToolboxExecBound(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("x2")
	var wg sync.WaitGroup
	codes := make(chan int, supervisor.MaxExecsPerSandbox+4)
	for range supervisor.MaxExecsPerSandbox + 4 {
		wg.Go(func() {
			_, r := e.execute(base, `{"command":"sleep 4","timeout":20}`)
			codes <- r.code
		})
	}
	wg.Wait()
	close(codes)
	busy := 0
	for c := range codes {
		if c == 429 {
			busy++
		} else if c != 200 {
			t.Errorf("status %d", c)
		}
	}
	if busy == 0 {
		t.Fatal("no command was refused past the bound")
	}
	if out, _ := e.execute(base, `{"command":"true"}`); out.ExitCode != 0 {
		t.Fatal("the toolbox does not serve after the bound")
	}
}

func multipartBody(t *testing.T, fields ...string) (string, *bytes.Buffer) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		if strings.HasSuffix(fields[i], "file") {
			w, _ := mw.CreateFormFile(fields[i], "f")
			io.WriteString(w, fields[i+1])
		} else {
			mw.WriteField(fields[i], fields[i+1])
		}
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func (e *env) upload(url, ctype string, body io.Reader) resp {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+url, body)
	req.Header.Set("Content-Type", ctype)
	res, err := authClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

// TestToolboxFiles is long because it is one scenario whose steps build
// on each other: split, each part would need the state the one before
// left.
func TestToolboxFiles(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("f1")
	ws := filepath.Join(e.sup.Root(), "f1", supervisor.WorkspaceDir)

	blob := make([]byte, 3<<20)
	rand.Read(blob)
	ct, body := multipartBody(t, "file", string(blob))
	// As Daytona does, an upload makes the directories it needs.
	if r := e.upload(base+"/files/upload?path=made/a/b/deep.bin", ct, body); r.code != 200 {
		t.Fatalf("upload into missing directories: %d %s", r.code, r.body)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "made/a/b/deep.bin")); !bytes.Equal(got, blob) {
		t.Fatalf("the deep upload holds %d bytes", len(got))
	}
	ct, body = multipartBody(t, "file", string(blob))
	if r := e.do("POST", base+"/files/folder?path=dir&mode=0750", ""); r.code != 201 {
		t.Fatalf("folder: %d %s", r.code, r.body)
	}
	ct, body = multipartBody(t, "file", string(blob))
	if r := e.upload(base+"/files/upload?path=dir/blob.bin", ct, body); r.code != 200 {
		t.Fatalf("upload: %d %s", r.code, r.body)
	}
	r := e.do("GET", base+"/files?path=dir", "")
	var list []daytona.FileInfo
	if json.Unmarshal(r.body, &list); len(list) != 1 || list[0].Name != "blob.bin" || list[0].Size != int64(len(blob)) || list[0].Permissions != "0644" {
		t.Fatalf("list: %s", r.body)
	}
	if r := e.do("GET", base+"/files/download?path="+ws+"/dir/blob.bin", ""); r.code != 200 || !bytes.Equal(r.body, blob) {
		t.Fatalf("download: %d, %d bytes", r.code, len(r.body))
	}
	// A bulk download's parts carry their length, which the SDKs read
	// for their progress; a path that cannot be read is an error part.
	r = e.do("POST", base+"/files/bulk-download", `{"paths":["dir/blob.bin","missing"]}`)
	_, params, _ := mime.ParseMediaType(r.hdr.Get("Content-Type"))
	mr := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
	var parts []string
	for {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		got, _ := io.ReadAll(part)
		parts = append(parts, part.FormName()+" "+part.Header.Get("Content-Length"))
		if part.FormName() == "file" && !bytes.Equal(got, blob) {
			t.Fatalf("bulk download: the file part holds %d bytes", len(got))
		}
	}
	if want := []string{"file " + strconv.Itoa(len(blob)), "error "}; !slices.Equal(parts, want) {
		t.Fatalf("bulk download parts %q, want %q", parts, want)
	}
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one needle\ntwo\nneedle three\n"), 0o644)
	r = e.do("GET", base+"/files/find?path=.&pattern=needle", "")
	if !strings.Contains(string(r.body), `"line":3`) || !strings.Contains(string(r.body), `"content":"one needle"`) {
		t.Fatalf("find: %s", r.body)
	}
	if r := e.do("GET", base+"/files/search?path=.&pattern=*.bin", ""); !strings.Contains(string(r.body), `"dir/blob.bin"`) {
		t.Fatalf("search: %s", r.body)
	}
	if r := e.do("POST", base+"/files/replace", `{"files":["a.txt","missing.txt"],"pattern":"needle","newValue":"pin"}`); !strings.Contains(string(r.body), `"success":false`) {
		t.Fatalf("replace: %s", r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one pin\ntwo\npin three\n" {
		t.Fatalf("replaced: %q", b)
	}
	if r := e.do("POST", base+"/files/move?source=a.txt&destination=dir/b.txt", ""); r.code != 200 {
		t.Fatalf("move: %d %s", r.code, r.body)
	}
	if r := e.do("POST", base+"/files/permissions?path=dir/b.txt&mode=0600", ""); r.code != 200 {
		t.Fatalf("permissions: %d %s", r.code, r.body)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "dir/b.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	daytonaError(t, e.do("POST", base+"/files/permissions?path=dir/b.txt&owner=nobody-else", ""), 400)
	daytonaError(t, e.do("DELETE", base+"/files?path=dir", ""), 409) // not empty, not recursive
	if r := e.do("DELETE", base+"/files?path=dir&recursive=true", ""); r.code != 204 {
		t.Fatalf("delete: %d %s", r.code, r.body)
	}

	// Escapes: "..", an absolute path elsewhere and a link planted in the
	// workspace are refused; nothing outside is read or written.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600)
	os.Symlink(outside, filepath.Join(ws, "link"))
	for _, p := range []string{"../../x", outside + "/secret", "link/secret", "/etc/passwd"} {
		r := e.do("GET", base+"/files/download?path="+p, "")
		if r.code != 400 || strings.Contains(string(r.body), "s3cret") {
			t.Errorf("download %s: %d %s", p, r.code, r.body)
		}
		ct, body := multipartBody(t, "file", "pwned")
		if r := e.upload(base+"/files/upload?path="+p+"-new", ct, body); r.code != 400 {
			t.Errorf("upload %s: %d %s", p, r.code, r.body)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("something was written outside: %v", entries)
	}
	// An upload past the bound is 413 and writes nothing.
	ct, body = multipartBody(t, "file", strings.Repeat("x", 2<<20))
	small := newRealEnvWith(t, 1<<20)
	sbase := small.toolbox("f2")
	if r := small.upload(sbase+"/files/upload?path=big", ct, body); r.code != 413 {
		t.Fatalf("too large: %d %s", r.code, r.body)
	}
	if _, err := os.Stat(filepath.Join(small.sup.Root(), "f2", supervisor.WorkspaceDir, "big")); err == nil {
		t.Fatal("a refused upload left a file")
	}
	// A JSON body to an upload route, and multipart elsewhere, are refused.
	daytonaError(t, e.do("POST", base+"/files/upload?path=x", `{}`), 415)
	ct, body = multipartBody(t, "file", "x")
	daytonaError(t, e.upload(base+"/process/execute", ct, body), 415)
}

func newRealEnvWith(t *testing.T, maxUpload int64) *env {
	e := newRealEnv(t, nil)
	s, err := New(e.sup, Options{Daytona: e.sup, Version: "test", Token: testToken, MaxUpload: maxUpload})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = s
	return e
}

func TestToolboxSessions(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("s1")
	if r := e.do("POST", base+"/process/session", `{"sessionId":"work"}`); r.code != 201 {
		t.Fatalf("create session: %d %s", r.code, r.body)
	}
	daytonaError(t, e.do("POST", base+"/process/session", `{"sessionId":"work"}`), 409)
	run := func(cmd string, async bool) daytona.SessionExecuteResponse {
		t.Helper()
		r := e.do("POST", base+"/process/session/work/exec", fmt.Sprintf(`{"command":%q,"runAsync":%v}`, cmd, async))
		var out daytona.SessionExecuteResponse
		if json.Unmarshal(r.body, &out); (r.code != 200 && !async) || (r.code != 202 && async) {
			t.Fatalf("exec %q: %d %s", cmd, r.code, r.body)
		}
		return out
	}
	run("cd /tmp && export X=1", false)
	if out := run("pwd; echo $X", false); out.Stdout != "/tmp\n1\n" || *out.ExitCode != 0 {
		t.Fatalf("state across commands: %+v", out)
	}
	// An async command: its logs followed to its end.
	c := run("for i in 1 2 3; do echo line $i; sleep 0.1; done", true)
	r := e.do("GET", base+"/process/session/work/command/"+c.CmdID+"/logs?follow=true", "")
	if r.code != 200 || string(r.body) != "line 1\nline 2\nline 3\n" {
		t.Fatalf("followed logs: %d %q", r.code, r.body)
	}
	r = e.do("GET", base+"/process/session/work/command/"+c.CmdID, "")
	if !strings.Contains(string(r.body), `"exitCode":0`) {
		t.Fatalf("command: %s", r.body)
	}
	// Input to a running command.
	c = run("read a; echo got $a", true)
	testenv.Eventually(t, "input taken", func() bool {
		return e.do("POST", base+"/process/session/work/command/"+c.CmdID+"/input", `{"data":"yes\n"}`).code == 204
	})
	testenv.Eventually(t, "read ends", func() bool {
		r := e.do("GET", base+"/process/session/work/command/"+c.CmdID+"/logs", "")
		return strings.Contains(string(r.body), `"stdout":"got yes\n"`)
	})
	if r := e.do("GET", base+"/process/session", ""); !strings.Contains(string(r.body), `"sessionId":"work"`) {
		t.Fatalf("sessions: %s", r.body)
	}
	if r := e.do("GET", base+"/process/session/entrypoint/logs", ""); r.code != 200 || !strings.Contains(string(r.body), "listening") {
		t.Fatalf("entrypoint logs: %d %s", r.code, r.body)
	}
	if r := e.do("DELETE", base+"/process/session/work", ""); r.code != 204 {
		t.Fatalf("delete session: %d", r.code)
	}
	daytonaError(t, e.do("GET", base+"/process/session/work", ""), 404)
	for _, p := range []string{"/git/status", "/computeruse/status"} {
		daytonaError(t, e.do("GET", base+p, ""), 400)
	}
}

// A stop while a command runs leaves none of it: the runtime ends what
// the toolbox started with the sandbox.
func TestToolboxStopEndsCommands(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("k1")
	done := make(chan resp, 1)
	go func() {
		_, r := e.execute(base, `{"command":"sh -c 'echo $$ > pid; exec sleep 300'","timeout":600}`)
		done <- r
	}()
	e.do("POST", base+"/process/session", `{"sessionId":"bg"}`)
	e.do("POST", base+"/process/session/bg/exec", `{"command":"sleep 300","runAsync":true}`)
	ws := filepath.Join(e.sup.Root(), "k1", supervisor.WorkspaceDir)
	var pid int
	testenv.Eventually(t, "the command runs", func() bool {
		b, _ := os.ReadFile(filepath.Join(ws, "pid"))
		_, err := fmt.Sscan(string(b), &pid)
		return err == nil
	})
	e.do("POST", "/api/sandbox/k1/stop", "")
	<-done
	testenv.Eventually(t, "no process is left", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	})
	daytonaError(t, e.do("POST", base+"/process/execute", `{"command":"true"}`), 409)
}

// As Daytona does, an upload goes through a link that stays in the
// workspace (a relative link to a sibling; a dangling link's target is
// made), and one through a link that leads out is refused.
func TestUploadThroughLinks(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("l1")
	ws := filepath.Join(e.sup.Root(), "l1", supervisor.WorkspaceDir)
	os.WriteFile(filepath.Join(ws, "sibling.txt"), []byte("old"), 0o644)
	os.Symlink("sibling.txt", filepath.Join(ws, "link"))
	os.Symlink("made/later.txt", filepath.Join(ws, "dangling"))
	os.Symlink(t.TempDir(), filepath.Join(ws, "out"))
	for name, target := range map[string]string{"link": "sibling.txt", "dangling": "made/later.txt"} {
		ct, body := multipartBody(t, "file", "through "+name)
		if r := e.upload(base+"/files/upload?path="+name, ct, body); r.code != 200 {
			t.Fatalf("upload through %s: %d %s", name, r.code, r.body)
		}
		if got, _ := os.ReadFile(filepath.Join(ws, target)); string(got) != "through "+name {
			t.Errorf("%s: %q", target, got)
		}
	}
	ct, body := multipartBody(t, "file", "x")
	if r := e.upload(base+"/files/upload?path=out/x", ct, body); r.code != 400 {
		t.Fatalf("upload through a link out of the workspace: %d %s", r.code, r.body)
	}
}

// code-run runs the code with the sandbox's interpreter for its
// language, as the SDK sends it: its argv after the code, its variables,
// its exit code; a language with no runner here is a 400 naming it.
func TestCodeRun(t *testing.T) {
	e := newRealEnv(t, nil)
	base := e.toolbox("c1")
	type result struct {
		Result    string `json:"result"`
		ExitCode  int    `json:"exitCode"`
		Artifacts struct {
			Charts []json.RawMessage `json:"charts"`
		} `json:"artifacts"`
	}
	cases := []struct {
		lang, code string
		argv       []string
		want       string
		exit       int
	}{
		{"python", "import sys, os\nprint(sum(range(10)), sys.argv[1:], os.environ['GREETING'])", []string{"a", "b"}, "45 ['a', 'b'] hi\n", 0},
		{"python", "raise SystemExit(3)", nil, "", 3},
		{"javascript", "console.log(6 * 7, process.argv.slice(2).join(','), process.env.GREETING)", []string{"x"}, "42 x hi\n", 0},
	}
	for _, c := range cases {
		if _, err := exec.LookPath(map[string]string{"python": "python3", "javascript": "node"}[c.lang]); err != nil {
			t.Logf("%s is not installed here: its case is not run", c.lang)
			continue
		}
		body, _ := json.Marshal(map[string]any{"code": c.code, "language": c.lang, "argv": c.argv, "envs": map[string]string{"GREETING": "hi"}})
		r := e.do("POST", base+"/process/code-run", string(body))
		var got result
		if r.code != 200 || json.Unmarshal(r.body, &got) != nil || got.Result != c.want || got.ExitCode != c.exit || got.Artifacts.Charts == nil {
			t.Errorf("%s %q: %d %s", c.lang, c.code, r.code, r.body)
		}
	}
	// State is not kept between runs: each is a program of its own.
	if _, err := exec.LookPath("python3"); err == nil {
		e.do("POST", base+"/process/code-run", `{"code":"x = 1","language":"python"}`)
		r := e.do("POST", base+"/process/code-run", `{"code":"print(x)","language":"python"}`)
		if !strings.Contains(string(r.body), "NameError") {
			t.Errorf("a second run saw the first's state: %s", r.body)
		}
	}
	for _, c := range []struct{ body, names string }{
		{`{"code":"1","language":"typescript"}`, "typescript"},
		{`{"code":"1","language":"cobol"}`, "cobol"},
		{`{"code":"","language":"python"}`, "code is required"},
	} {
		if msg := daytonaError(t, e.do("POST", base+"/process/code-run", c.body), 400); !strings.Contains(msg, c.names) {
			t.Errorf("%s: %q", c.body, msg)
		}
	}
}
