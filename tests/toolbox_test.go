package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// daytonaToolboxDoc is Daytona's toolbox document, the contract of
// /api/toolbox/{id}.
const daytonaToolboxDoc = "testdata/daytona/daytona-toolbox.yaml"

// toolboxClient calls one sandbox's toolbox, every exchange checked
// against Daytona's toolbox document.
type toolboxClient struct {
	t    *testing.T
	d    *testenv.Daemon
	base string
	c    *http.Client
	chk  *daytonaChecker
}

func newToolboxClient(t *testing.T, d *testenv.Daemon, id string) *toolboxClient {
	base := "/api/toolbox/" + id
	chk := newChecker(t, daytonaToolboxDoc, base)
	return &toolboxClient{t: t, d: d, base: base, chk: chk, c: &http.Client{Transport: chk, Timeout: 5 * time.Minute}}
}

func (tc *toolboxClient) do(method, path, ctype string, body io.Reader) (int, []byte) {
	tc.t.Helper()
	req, _ := http.NewRequest(method, tc.d.URL+tc.base+path, body)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+tc.d.Token)
	res, err := tc.c.Do(req)
	if err != nil {
		tc.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func (tc *toolboxClient) json(method, path, body string) (int, []byte) {
	tc.t.Helper()
	if body == "" {
		return tc.do(method, path, "", nil)
	}
	return tc.do(method, path, "application/json", strings.NewReader(body))
}

func (tc *toolboxClient) execute(body string) (int, struct {
	Result   string
	ExitCode int
}) {
	tc.t.Helper()
	code, b := tc.json("POST", "/process/execute", body)
	var out struct {
		Result   string
		ExitCode int
	}
	json.Unmarshal(b, &out)
	return code, out
}

// upload streams data as the form's file part.
func (tc *toolboxClient) upload(path string, data []byte) (int, []byte) {
	tc.t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, _ := mw.CreateFormFile("file", filepath.Base(path))
		w.Write(data)
		mw.Close()
		pw.Close()
	}()
	return tc.do("POST", "/files/upload?path="+path, mw.FormDataContentType(), pr)
}

// toolboxMaxUpload is the daemons' max_upload_bytes here: above the
// suite's 10 MiB round trip.
const toolboxMaxUpload = 16 << 20

var toolboxEnv = []string{fmt.Sprintf("AGENT_CONTROL_PLANE_MAX_UPLOAD_BYTES=%d", toolboxMaxUpload)}

// toolboxSuite is what a runtime's run of the suite knows of it.
type toolboxSuite struct {
	workDir string                              // the workspace as the workload sees it
	hostDir string                              // the workspace on this machine
	gone    func(t *testing.T, pid string) bool // the command of pid (as the sandbox sees it) is no more
	// ordered: merged output keeps the order of writes across stdout and
	// stderr (one pipe); docker's engine sends the two apart.
	ordered bool
}

func sortedLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// runToolbox drives a running sandbox's toolbox as Daytona's SDKs do.
//
// It is long because it is the toolbox's whole surface driven against
// one sandbox (native or docker), each step on the files and sessions
// the one before made.
func runToolbox(t *testing.T, d *testenv.Daemon, id string, s toolboxSuite) {
	tc := newToolboxClient(t, d, id)

	if code, b := tc.json("GET", "/work-dir", ""); code != 200 || string(b) != `{"dir":"`+s.workDir+`"}`+"\n" {
		t.Fatalf("work-dir: %d %s", code, b)
	}
	// A command: its exit code, variables, directory, both outputs.
	tc.json("POST", "/files/folder?path=sub&mode=0755", "")
	code, out := tc.execute(`{"command":"sh -c 'echo $GREETING; pwd; echo oops >&2; exit 3'","cwd":"sub","envs":{"GREETING":"hi"}}`)
	want := "hi\n" + s.workDir + "/sub\noops\n"
	if !s.ordered { // the engine sends the two streams apart: lines, in any order
		want, out.Result = sortedLines(want), sortedLines(out.Result)
	}
	if code != 200 || out.ExitCode != 3 || out.Result != want {
		t.Fatalf("execute: %d %+v", code, out)
	}
	if code, out := tc.execute(`{"command":"sh -c 'echo $AGENT_SANDBOX_ID $GIT_TERMINAL_PROMPT'"}`); code != 200 || out.Result != id+" 0\n" {
		t.Fatalf("the sandbox's environment: %d %+v", code, out)
	}
	if code, b := tc.json("POST", "/process/execute", `{"command":"sleep 30","timeout":1}`); code != http.StatusRequestTimeout {
		t.Fatalf("timeout: %d %s", code, b)
	}
	// The command goes to the sandbox's shell, as the SDK sends it.
	if code, out := tc.execute(`{"command":"echo a && echo b | tr a-z A-Z; exit 4"}`); code != 200 || out.ExitCode != 4 || out.Result != "a\nB\n" {
		t.Fatalf("shell syntax: %d %+v", code, out)
	}
	// code-run: the sandbox's python, or a 400 naming it where the
	// sandbox has none (the busybox image).
	_, pyErr := exec.LookPath("python3")
	switch code, b := tc.json("POST", "/process/code-run", `{"code":"print(sum(range(10)))","language":"python"}`); {
	case s.ordered && pyErr == nil: // a native sandbox runs this machine's python3
		if code != 200 || !strings.Contains(string(b), `"result":"45\n"`) {
			t.Fatalf("code-run: %d %s", code, b)
		}
	case !s.ordered: // the busybox image has none
		if code != 400 || !strings.Contains(string(b), "python3") {
			t.Fatalf("code-run without python3: %d %s", code, b)
		}
	default:
		t.Log("python3 is not installed here: code-run's answer is not checked")
	}

	// 10 MiB of random bytes up, listed, and down again.
	blob := make([]byte, 10<<20)
	rand.Read(blob)
	if code, b := tc.upload("blob.bin", blob); code != 200 {
		t.Fatalf("upload: %d %s", code, b)
	}
	code, b := tc.json("GET", "/files", "")
	if code != 200 || !strings.Contains(string(b), fmt.Sprintf(`"name":"blob.bin","isDir":false,"size":%d`, len(blob))) {
		t.Fatalf("list: %d %s", code, b)
	}
	if code, b := tc.json("GET", "/files/download?path=blob.bin", ""); code != 200 || !bytes.Equal(b, blob) {
		t.Fatalf("download: %d, %d bytes back", code, len(b))
	}

	// Escapes are refused; nothing outside is read or written.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600)
	if err := os.Symlink(outside, filepath.Join(s.hostDir, "planted")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../../../etc/passwd", "/etc/passwd", "planted/secret", s.workDir + "/../x"} {
		if code, b := tc.json("GET", "/files/download?path="+p, ""); code != 400 || strings.Contains(string(b), "s3cret") {
			t.Errorf("download %s: %d %s", p, code, b)
		}
		if code, _ := tc.upload(p+"-new", []byte("pwned")); code != 400 {
			t.Errorf("upload %s: %d", p, code)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("written outside: %v", ents)
	}

	// The other file routes, each checked against Daytona's document.
	tc.upload("a.txt", []byte("one needle\ntwo\n"))
	for _, c := range []struct {
		method, path, ctype, body string
		want                      int
		has                       string
	}{
		{"GET", "/files/info?path=a.txt", "", "", 200, `"name":"a.txt"`},
		{"GET", "/files/find?path=.&pattern=needle", "", "", 200, `"line":1`},
		{"GET", "/files/search?path=.&pattern=*.txt", "", "", 200, `"a.txt"`},
		{"POST", "/files/replace", "application/json", `{"files":["a.txt"],"pattern":"needle","newValue":"pin"}`, 200, `"success":true`},
		{"POST", "/files/move?source=a.txt&destination=sub/b.txt", "", "", 200, ""},
		{"POST", "/files/permissions?path=sub/b.txt&mode=0600", "", "", 200, ""},
		{"POST", "/files/bulk-download", "application/json", `{"paths":["sub/b.txt","missing"]}`, 200, "one pin"},
		{"DELETE", "/files?path=sub&recursive=true", "", "", 204, ""},
		{"GET", "/version", "", "", 200, `"version"`},
		{"GET", "/user-home-dir", "", "", 200, `"dir"`},
		{"GET", "/process/session/entrypoint", "", "", 200, `"sessionId":"entrypoint"`},
		{"GET", "/process/session/entrypoint/logs", "", "", 200, `"stdout"`},
		{"GET", "/git/status?path=.", "", "", 400, "git"},
	} {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		code, b := tc.do(c.method, c.path, c.ctype, body)
		if code != c.want || !strings.Contains(string(b), c.has) {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, b)
		}
	}
	{
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.WriteField("files[0].path", "bulk/one.txt")
		w, _ := mw.CreateFormFile("files[0].file", "one.txt")
		io.WriteString(w, "bulk one")
		mw.Close()
		tc.json("POST", "/files/folder?path=bulk&mode=0755", "")
		if code, b := tc.do("POST", "/files/bulk-upload", mw.FormDataContentType(), &buf); code != 200 {
			t.Errorf("bulk upload: %d %s", code, b)
		}
		if b, _ := os.ReadFile(filepath.Join(s.hostDir, "bulk", "one.txt")); string(b) != "bulk one" {
			t.Errorf("bulk upload wrote %q", b)
		}
	}

	// A session keeps the shell's state.
	if code, b := tc.json("POST", "/process/session", `{"sessionId":"s1"}`); code != 201 {
		t.Fatalf("session: %d %s", code, b)
	}
	tc.json("POST", "/process/session/s1/exec", `{"command":"cd /tmp && export X=1"}`)
	code, b = tc.json("POST", "/process/session/s1/exec", `{"command":"pwd; echo $X"}`)
	if code != 200 || !strings.Contains(string(b), `"stdout":"/tmp\n1\n"`) {
		t.Fatalf("session state: %d %s", code, b)
	}
	// An async command, its logs followed to the end.
	code, b = tc.json("POST", "/process/session/s1/exec", `{"command":"for i in 1 2 3; do echo n$i; sleep 0.1; done","runAsync":true}`)
	var async struct{ CmdID string }
	if json.Unmarshal(b, &async); code != 202 || async.CmdID == "" {
		t.Fatalf("async: %d %s", code, b)
	}
	req, _ := http.NewRequest("GET", d.URL+tc.base+"/process/session/s1/command/"+async.CmdID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+d.Token)
	res, err := http.DefaultClient.Do(req) // a stream: its frames are not one document answer
	if err != nil {
		t.Fatal(err)
	}
	followed, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(followed) != "n1\nn2\nn3\n" {
		t.Fatalf("followed: %q", followed)
	}
	if code, b := tc.json("GET", "/process/session/s1/command/"+async.CmdID, ""); code != 200 || !strings.Contains(string(b), `"exitCode":0`) {
		t.Fatalf("command: %d %s", code, b)
	}
	if code, b := tc.json("GET", "/process/session/s1/command/"+async.CmdID+"/logs", ""); code != 200 || !strings.Contains(string(b), `"stdout":"n1\nn2\nn3\n"`) {
		t.Fatalf("command logs: %d %s", code, b)
	}
	code, b = tc.json("POST", "/process/session/s1/exec", `{"command":"read v; echo got $v","runAsync":true}`)
	json.Unmarshal(b, &async)
	testenv.Eventually(t, "input reaches the command", func() bool {
		code, _ := tc.json("POST", "/process/session/s1/command/"+async.CmdID+"/input", `{"data":"x\n"}`)
		return code == 204
	})
	// Followed over a WebSocket as the SDK does, the streams apart.
	code, b = tc.json("POST", "/process/session/s1/exec", `{"command":"echo out; echo err >&2; sleep 0.2; echo more","runAsync":true}`)
	json.Unmarshal(b, &async)
	if stdout, stderr := followLogsWS(t, d, tc.base+"/process/session/s1/command/"+async.CmdID+"/logs?follow=true", nil); stdout != "out\nmore\n" || stderr != "err\n" {
		t.Fatalf("followed over a WebSocket: stdout %q, stderr %q", stdout, stderr)
	}
	if stdout, _ := followLogsWS(t, d, tc.base+"/process/session/entrypoint/logs?follow=true", func(o, _ string) bool { return strings.Contains(o, "entrypoint says hi") }); !strings.Contains(stdout, "entrypoint says hi") {
		t.Fatalf("the entrypoint's logs followed: %q", stdout)
	}
	runPty(t, tc)
	runInterpreter(t, tc, s.ordered)
	runLanguageServer(t, tc, s.workDir, s.ordered)
	if code, b := tc.json("GET", "/process/session", ""); code != 200 || !strings.Contains(string(b), `"sessionId":"s1"`) {
		t.Fatalf("sessions: %d %s", code, b)
	}
	if code, b := tc.json("GET", "/process/session/s1", ""); code != 200 {
		t.Fatalf("session: %d %s", code, b)
	}
	if code, _ := tc.json("DELETE", "/process/session/s1", ""); code != 204 {
		t.Fatalf("delete session: %d", code)
	}

	// Bounds: too many commands at once, too much output.
	var wg sync.WaitGroup
	busy := make(chan int, supervisor.MaxExecsPerSandbox+4)
	for range supervisor.MaxExecsPerSandbox + 4 {
		wg.Go(func() {
			code, _ := tc.json("POST", "/process/execute", `{"command":"sleep 4","timeout":20}`)
			busy <- code
		})
	}
	wg.Wait()
	close(busy)
	refused := 0
	for c := range busy {
		if c == 429 {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no command refused past the bound")
	}
	code, out = tc.execute(`{"command":"sh -c 'head -c 3000000 /dev/zero | tr \"\\\\0\" x; echo; echo last'"}`)
	if code != 200 || !strings.HasPrefix(out.Result, "[output cut") || !strings.HasSuffix(out.Result, "\nlast\n") {
		t.Fatalf("big output: %d, %d bytes", code, len(out.Result))
	}
	if code, b := tc.upload("big.bin", make([]byte, toolboxMaxUpload+1)); code != 413 {
		t.Fatalf("an upload past max_upload_bytes: %d %s", code, b)
	}
	if _, err := os.Stat(filepath.Join(s.hostDir, "big.bin")); err == nil {
		t.Fatal("a refused upload left a file")
	}
	if code, _ := tc.json("GET", "/version", ""); code != 200 {
		t.Fatal("the toolbox does not serve after its bounds were pushed")
	}

	// A stop while a long command runs leaves none of it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		tc.json("POST", "/process/execute", `{"command":"sh -c 'echo $$ > long.pid; exec sleep 300'","timeout":600}`)
	}()
	var pid string
	testenv.Eventually(t, "the long command runs", func() bool {
		b, _ := os.ReadFile(filepath.Join(s.hostDir, "long.pid"))
		pid = strings.TrimSpace(string(b))
		return pid != ""
	})
	if code, b := call(t, d, "POST", "/v1/sandboxes/"+id+"/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	<-done
	testenv.Eventually(t, "nothing of the command is left", func() bool { return s.gone(t, pid) })
	if code, _ := tc.json("POST", "/process/execute", `{"command":"true"}`); code != 409 {
		t.Fatalf("execute in a stopped sandbox: %d", code)
	}
	t.Logf("%d toolbox exchanges checked against Daytona's document", tc.chk.n)
}

func TestToolboxNative(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: toolboxEnv})
	create(t, d, `{"name":"tb","envVars":{"STUB_AGENT_PRINT":"entrypoint says hi"}}`)
	waitState(t, d, "tb", "started")
	ws := filepath.Join(d.Root, "tb", supervisor.WorkspaceDir)
	rec := record(t, d, "tb")
	cgroupDir := "" // with containment: the sandbox's cgroup, which the command ran in
	if rec.Handle != nil {
		if path, err := native.CgroupPath(*rec.Handle); err == nil && path != "" {
			_, cgroupDir = sandboxCgroup(t, d, "tb")
		}
	}
	t.Logf("the sandbox's cgroup: %q (empty: containment off)", cgroupDir)
	// An isolated sandbox's commands report pids of its own PID
	// namespace, not the host's: what is left of them is found by the
	// marker they carry and the cgroup they are in.
	isolated := daemonIsolates(t, d)
	runToolbox(t, d, "tb", toolboxSuite{workDir: ws, hostDir: ws, ordered: true, gone: func(t *testing.T, pid string) bool {
		_, err := os.Stat("/proc/" + pid)
		if !isolated && !os.IsNotExist(err) || len(testenv.Marked(rec.Marker)) != 0 {
			return false
		}
		if cgroupDir != "" {
			b, err := os.ReadFile(filepath.Join(cgroupDir, "cgroup.procs"))
			return err != nil || len(strings.TrimSpace(string(b))) == 0 // removed, or empty
		}
		return true
	}})
}

func TestToolboxDocker(t *testing.T) {
	c := dockertest.ShellEngine(t)
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: toolboxEnv, Config: `
[snapshots.shell]
runtime = "docker"
image = "` + dockertest.ShellImage + `"
command = ["/agent-control-plane", "stub-agent"]
`})
	t.Cleanup(func() { c.NetworkRemove(context.Background(), conf.InstanceName(d.Root)) })
	t.Cleanup(func() { call(t, d, "DELETE", "/v1/sandboxes/tbd", "") })
	create(t, d, `{"name":"tbd","snapshot":"shell","envVars":{"STUB_AGENT_PRINT":"entrypoint says hi"}}`)
	waitState(t, d, "tbd", "started")
	cid := containerOf(t, d, "tbd")
	runToolbox(t, d, "tbd", toolboxSuite{workDir: "/workspace", hostDir: filepath.Join(d.Root, "tbd", supervisor.WorkspaceDir),
		gone: func(t *testing.T, _ string) bool {
			// The container is stopped (removed): no process of it runs.
			ins, err := c.ContainerInspect(context.Background(), cid)
			return err != nil || !ins.State.Running
		}})
}
