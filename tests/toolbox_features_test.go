package tests

import (
	"encoding/json"
	"net/url"
	"os/exec"
	"strings"
	"testing"
)

// The toolbox's features beyond commands and files, each driven as
// Daytona's SDK drives it, on one running sandbox (runToolbox's).

// runPty drives a PTY session as the SDK's CreatePty does: created,
// connected, typed into, resized, exited, deleted.
func runPty(t *testing.T, tc *toolboxClient) {
	if code, b := tc.json("POST", "/process/pty", `{"id":"p1","cols":100,"rows":30,"envs":{"GREETING":"hi pty"}}`); code != 201 || !strings.Contains(string(b), `"sessionId":"p1"`) {
		t.Fatalf("create a PTY: %d %s", code, b)
	}
	p := connectPty(t, tc.d, tc.base, "p1")
	p.send(t, "tty; stty size; echo \"$GREETING\" $TERM\n")
	p.await(t, "/dev/pts/", "30 100", "hi pty xterm-256color")
	if code, b := tc.json("POST", "/process/pty/p1/resize", `{"cols":120,"rows":40}`); code != 200 || !strings.Contains(string(b), `"cols":120`) {
		t.Fatalf("resize: %d %s", code, b)
	}
	p.send(t, "stty size\n")
	p.await(t, "40 120")
	if code, b := tc.json("GET", "/process/pty", ""); code != 200 || !strings.Contains(string(b), `"id":"p1"`) || !strings.Contains(string(b), `"active":true`) {
		t.Fatalf("PTY list: %d %s", code, b)
	}
	p.send(t, "exit 5\n")
	if code := p.wait(t); code != 5 {
		t.Fatalf("exit 5 typed: the PTY says %d", code)
	}
	if code, b := tc.json("GET", "/process/pty/p1", ""); code != 200 || !strings.Contains(string(b), `"active":false`) {
		t.Fatalf("an exited PTY: %d %s", code, b)
	}
	if code, b := tc.json("DELETE", "/process/pty/p1", ""); code != 200 {
		t.Fatalf("delete a PTY: %d %s", code, b)
	}
	if code, _ := tc.json("GET", "/process/pty/p1", ""); code != 404 {
		t.Fatalf("a deleted PTY: %d", code)
	}
}

// runInterpreter drives the code interpreter as the SDK does: state kept
// in a context across runs, contexts apart, errors, a timeout; where the
// sandbox has no python3 (the busybox image), an error naming it.
func runInterpreter(t *testing.T, tc *toolboxClient, native bool) {
	_, pyErr := exec.LookPath("python3")
	if !native || pyErr != nil {
		r := runCodeWS(t, tc.d, tc.base, map[string]any{"code": "print(1)"})
		if r.errName == "" || !strings.Contains(r.errValue, "python3") || r.closeCode != 1000 {
			t.Fatalf("code without python3 in the sandbox: %+v", r)
		}
		return
	}
	code, b := tc.json("POST", "/process/interpreter/context", `{"language":"python"}`)
	var ic struct{ ID string }
	if json.Unmarshal(b, &ic); code != 200 || ic.ID == "" {
		t.Fatalf("create a context: %d %s", code, b)
	}
	run := func(ctxID, code string) codeRun {
		req := map[string]any{"code": code}
		if ctxID != "" {
			req["contextId"] = ctxID
		}
		return runCodeWS(t, tc.d, tc.base, req)
	}
	run(ic.ID, "counter = 41")
	if r := run(ic.ID, "import sys, os\ncounter += 1\nprint(counter)\nprint('warn', file=sys.stderr)\nos.system('echo from a subprocess')"); r.stdout != "42\nfrom a subprocess\n" || r.stderr != "warn\n" || r.errName != "" || r.closeCode != 1000 {
		t.Fatalf("state across runs: %+v", r)
	}
	if r := run("", "print('counter' in globals())"); r.stdout != "False\n" {
		t.Fatalf("the default context sees another context's state: %+v", r)
	}
	if r := run(ic.ID, "1/0"); r.errName != "ZeroDivisionError" || !strings.Contains(r.traceback, "ZeroDivisionError") {
		t.Fatalf("an error: %+v", r)
	}
	if r := runCodeWS(t, tc.d, tc.base, map[string]any{"code": "import time\ntime.sleep(30)", "contextId": ic.ID, "timeout": 1}); r.closeCode != 4001 {
		t.Fatalf("past its timeout: %+v", r)
	}
	if code, b := tc.json("GET", "/process/interpreter/context", ""); code != 200 || !strings.Contains(string(b), `"id":"`+ic.ID+`"`) || strings.Contains(string(b), `"id":"default"`) {
		t.Fatalf("contexts: %d %s", code, b)
	}
	if code, b := tc.json("DELETE", "/process/interpreter/context/"+ic.ID, ""); code != 200 {
		t.Fatalf("delete a context: %d %s", code, b)
	}
	if r := run(ic.ID, "print(1)"); r.errName == "" || !strings.Contains(r.errValue, "no interpreter context") {
		t.Fatalf("code in a deleted context: %+v", r)
	}
}

// runLanguageServer drives Daytona's language server for python as the
// SDK does (start, did-open, symbols, completions, did-close, stop),
// where the sandbox has pylsp (Debian's python3-pylsp, on this machine);
// elsewhere start answers a 400 naming it.
func runLanguageServer(t *testing.T, tc *toolboxClient, workDir string, native bool) {
	server := `{"languageId":"python","pathToProject":"` + workDir + `"}`
	if _, err := exec.LookPath("pylsp"); !native || err != nil {
		if code, b := tc.json("POST", "/lsp/start", server); code != 400 || !strings.Contains(string(b), "pylsp") {
			t.Fatalf("a language server the sandbox lacks: %d %s", code, b)
		}
		return
	}
	tc.upload("lsp_demo.py", []byte("import os\n\n\nclass Greeter:\n    def greet(self, name):\n        return 'hi ' + name\n\n\ndef main():\n    os.\n"))
	uri := "file://" + workDir + "/lsp_demo.py"
	doc := `{"languageId":"python","pathToProject":"` + workDir + `","uri":"` + uri + `"}`
	if code, b := tc.json("POST", "/lsp/did-open", doc); code != 404 {
		t.Fatalf("did-open before start: %d %s", code, b)
	}
	if code, b := tc.json("POST", "/lsp/start", server); code != 200 {
		t.Fatalf("lsp start: %d %s", code, b)
	}
	if code, b := tc.json("POST", "/lsp/did-open", doc); code != 200 {
		t.Fatalf("did-open: %d %s", code, b)
	}
	q := "languageId=python&pathToProject=" + url.QueryEscape(workDir)
	code, b := tc.json("GET", "/lsp/document-symbols?"+q+"&uri="+url.QueryEscape(uri), "")
	if code != 200 || !strings.Contains(string(b), `"name":"Greeter"`) || !strings.Contains(string(b), `"name":"main"`) {
		t.Fatalf("document symbols: %d %s", code, b)
	}
	if code, b := tc.json("GET", "/lsp/workspacesymbols?"+q+"&query=Greeter", ""); code != 200 || !strings.HasPrefix(string(b), "[") {
		t.Fatalf("workspace symbols: %d %s", code, b)
	}
	code, b = tc.json("POST", "/lsp/completions", `{"languageId":"python","pathToProject":"`+workDir+`","uri":"`+uri+`","position":{"line":9,"character":7}}`)
	if code != 200 || !strings.Contains(string(b), `"label":"path"`) {
		t.Fatalf("completions after os.: %d %.300s", code, b)
	}
	if code, b := tc.json("POST", "/lsp/did-close", doc); code != 200 {
		t.Fatalf("did-close: %d %s", code, b)
	}
	if code, b := tc.json("POST", "/lsp/stop", server); code != 200 {
		t.Fatalf("lsp stop: %d %s", code, b)
	}
	if code, _ := tc.json("GET", "/lsp/document-symbols?"+q+"&uri="+url.QueryEscape(uri), ""); code != 404 {
		t.Fatalf("symbols from a stopped server: %d", code)
	}
}
