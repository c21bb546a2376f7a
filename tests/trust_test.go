package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// The cheap denial-of-service paths of the toolbox, against the real
// daemon one after another: each is refused or bounded, the daemon stays
// under 256 MiB resident through all of them, and it never exits.
//
// It is long because its table of bombs shares one sandbox and the
// checks that the daemon stayed bounded after each.
func TestToolboxBombs(t *testing.T) {
	d := startDaemon(t)
	pid := d.Cmd.Process.Pid
	hc := d.HTTP(5 * time.Minute)
	req := func(method, path, ctype string, body io.Reader) (int, []byte) {
		t.Helper()
		r, _ := http.NewRequest(method, d.URL+path, body)
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		res, err := hc.Do(r)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	json := func(method, path, body string) (int, []byte) {
		t.Helper()
		return req(method, path, "application/json", strings.NewReader(body))
	}
	const maxRSS = 256 << 20
	alive := func(after string) {
		t.Helper()
		if rss := rssBytes(t, pid); rss > maxRSS {
			t.Fatalf("after %s the daemon is %d MiB resident", after, rss>>20)
		}
		if _, err := d.Info(); err != nil {
			t.Fatalf("after %s the daemon does not answer: %v", after, err)
		}
	}
	create(t, d, `{"name":"bomb"}`)
	waitState(t, d, "bomb", "started")
	ws := filepath.Join(d.Root, "bomb", supervisor.WorkspaceDir)
	tb := "/api/toolbox/bomb"

	// Replace: 8 MB of the pattern and a 1 MB value (terabytes).
	os.WriteFile(filepath.Join(ws, "eight"), bytes.Repeat([]byte("a"), 8<<20), 0o644)
	code, b := json("POST", tb+"/files/replace", fmt.Sprintf(`{"files":["eight"],"pattern":"a","newValue":%q}`, strings.Repeat("b", 1<<20-64)))
	if code != 200 || !strings.Contains(string(b), `"success":false`) {
		t.Fatalf("replace bomb: %d %.300s", code, b)
	}
	alive("the replace bomb")

	// Find: one 8 MiB line behind 100 hard links.
	line := bytes.Repeat([]byte("x"), 8<<20)
	copy(line[4<<20:], "needle")
	os.WriteFile(filepath.Join(ws, "line"), line, 0o644)
	for i := range 100 {
		os.Link(filepath.Join(ws, "line"), filepath.Join(ws, fmt.Sprint("hard", i)))
	}
	code, b = json("GET", tb+"/files/find?path=.&pattern=needle", "")
	if code != 200 || len(b) > 64<<10 || strings.Count(string(b), `"line":1`) != 1 {
		t.Fatalf("find bomb: %d, %d bytes", code, len(b))
	}
	alive("the find bomb")

	// A bulk upload made only of path fields.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for i := range 250_000 { // about 1 GiB if it were read whole
			if mw.WriteField(fmt.Sprintf("files[%d].path", i), strings.Repeat("p", 4000)) != nil {
				break
			}
		}
		mw.Close()
		pw.Close()
	}()
	code, _ = req("POST", tb+"/files/bulk-upload", mw.FormDataContentType(), pr)
	pr.Close()
	if code != 400 {
		t.Fatalf("a form of path fields alone: %d", code)
	}
	alive("the path-field upload")

	// 4,000 session creates for sandboxes that do not exist, 100 KB ids.
	for i := range 4000 {
		id := fmt.Sprintf("%d%s", i, strings.Repeat("x", 100_000))
		if code, _ := json("POST", "/api/toolbox/"+id+"/process/session", `{"sessionId":"s"}`); code != 404 && code != 400 && code != 431 {
			t.Fatalf("a session for an unknown sandbox: %d", code)
		}
	}
	alive("4,000 session creates for unknown sandboxes")

	// Three sessions printing 100 MiB each, at once.
	var wg sync.WaitGroup
	for i := range 3 {
		sid := fmt.Sprint("loud", i)
		if code, b := json("POST", tb+"/process/session", `{"sessionId":"`+sid+`"}`); code != 201 {
			t.Fatalf("session: %d %s", code, b)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b := json("POST", tb+"/process/session/"+sid+"/exec", `{"command":"head -c 104857600 /dev/zero | tr '\\0' y; echo; echo end"}`)
			if code != 200 || !strings.Contains(string(b), "end") {
				t.Errorf("a loud session: %d %.200s", code, b)
			}
		}()
	}
	wg.Wait()
	alive("three sessions printing 100 MiB each")

	// Input to a command that never reads, by clients that go away.
	json("POST", tb+"/process/session", `{"sessionId":"deaf"}`)
	code, b = json("POST", tb+"/process/session/deaf/exec", `{"command":"sleep 600","runAsync":true}`)
	cid := strings.Split(strings.Split(string(b), `"cmdId":"`)[1], `"`)[0]
	baseG, baseFDs := daemonGauges(t, d)
	for range 1030 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, _ := http.NewRequestWithContext(ctx, "POST", d.URL+tb+"/process/session/deaf/command/"+cid+"/input", strings.NewReader(`{"data":"`+strings.Repeat("z", 60000)+`"}`))
		r.Header.Set("Content-Type", "application/json")
		if res, err := hc.Do(r); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		cancel()
	}
	hc.CloseIdleConnections()
	testenv.Eventually(t, "goroutines and descriptors back to their level", func() bool {
		g, fds := daemonGauges(t, d)
		return g <= baseG+8 && fds <= baseFDs+8
	})
	alive("1,030 inputs to a command that never reads")

	// A 30,000-deep tree in the workspace: the sandbox is deleted whole.
	fd, _ := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	for range 30000 {
		unix.Mkdirat(fd, "d", 0o755)
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	if code, b := call(t, d, "DELETE", "/v1/sandboxes/bomb", ""); code != 204 && code != 200 {
		t.Fatalf("delete with a deep tree: %d %s", code, b)
	}
	testenv.Eventually(t, "the sandbox's directory gone", func() bool {
		ents, _ := os.ReadDir(d.Root)
		for _, e := range ents {
			if strings.Contains(e.Name(), "bomb") {
				return false
			}
		}
		return true
	})
	alive("deleting a 30,000-deep tree")
}
