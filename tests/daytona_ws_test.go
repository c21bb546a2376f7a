package tests

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// Daytona's SDKs stream over WebSockets with gorilla's client; these
// helpers read the streams as sdk-go/pkg/daytona does (pty_handle.go,
// process.go's processWebsocketStream), with the same library.

// dialToolbox opens a WebSocket to a toolbox path, with the SDK's
// header.
func dialToolbox(t *testing.T, d *testenv.Daemon, path string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(d.URL, "http") + path
	c, res, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + d.Token}})
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", path, err, status)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sdkPty is a PTY's connection as PtyHandle reads it.
type sdkPty struct {
	c         *websocket.Conn
	mu        sync.Mutex
	out       bytes.Buffer
	connected bool
	exitCode  *int
	exitErr   string
	done      chan struct{}
}

func connectPty(t *testing.T, d *testenv.Daemon, base, sid string) *sdkPty {
	p := &sdkPty{c: dialToolbox(t, d, base+"/process/pty/"+sid+"/connect"), done: make(chan struct{})}
	go p.read()
	testenv.Eventually(t, "the PTY's connected control message", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.connected
	})
	return p
}

func (p *sdkPty) read() {
	defer close(p.done)
	for {
		typ, data, err := p.c.ReadMessage()
		p.mu.Lock()
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok && ce.Code == websocket.CloseNormalClosure {
				var exit struct {
					ExitCode   *int    `json:"exitCode"`
					ExitReason *string `json:"exitReason"`
				}
				if json.Unmarshal([]byte(ce.Text), &exit) == nil && exit.ExitCode != nil {
					p.exitCode = exit.ExitCode
				}
				if exit.ExitReason != nil {
					p.exitErr = *exit.ExitReason
				}
			} else {
				p.exitErr = err.Error()
			}
			p.mu.Unlock()
			return
		}
		var ctrl struct{ Type, Status, Error string }
		if typ == websocket.TextMessage && json.Unmarshal(data, &ctrl) == nil && ctrl.Type == "control" {
			p.connected = ctrl.Status == "connected"
			p.exitErr = ctrl.Error
		} else {
			p.out.Write(data)
		}
		p.mu.Unlock()
	}
}

func (p *sdkPty) send(t *testing.T, s string) {
	t.Helper()
	if err := p.c.WriteMessage(websocket.BinaryMessage, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

func (p *sdkPty) await(t *testing.T, want ...string) {
	t.Helper()
	testenv.Eventually(t, "the terminal prints "+strings.Join(want, ", "), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, w := range want {
			if !strings.Contains(p.out.String(), w) {
				return false
			}
		}
		return true
	})
}

// wait is Wait: the exit code from the close's reason.
func (p *sdkPty) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the PTY's connection did not close")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitCode == nil {
		t.Fatalf("the PTY closed with no exit code: %q; output %q", p.exitErr, p.out.String())
	}
	return *p.exitCode
}

// followLogsWS reads a followed log as processWebsocketStream does: the
// two streams told apart by their markers, to the close.
func followLogsWS(t *testing.T, d *testenv.Daemon, path string, until func(stdout, stderr string) bool) (stdout, stderr string) {
	t.Helper()
	c := dialToolbox(t, d, path)
	var out, errs strings.Builder
	cur := &out
	c.SetReadDeadline(time.Now().Add(time.Minute))
	for until == nil || !until(out.String(), errs.String()) {
		_, msg, err := c.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				break
			}
			t.Fatalf("follow %s: %v", path, err)
		}
		for len(msg) > 0 {
			switch {
			case bytes.HasPrefix(msg, []byte{1, 1, 1}):
				cur, msg = &out, msg[3:]
			case bytes.HasPrefix(msg, []byte{2, 2, 2}):
				cur, msg = &errs, msg[3:]
			}
			next := len(msg)
			for _, m := range [][]byte{{1, 1, 1}, {2, 2, 2}} {
				if i := bytes.Index(msg, m); i >= 0 && i < next {
					next = i
				}
			}
			cur.Write(msg[:next])
			msg = msg[next:]
		}
	}
	return out.String(), errs.String()
}

// codeRun is what RunCode's channels give: the outputs, the error the
// code raised, and how the stream closed.
type codeRun struct {
	stdout, stderr    string
	errName, errValue string
	traceback         string
	closeCode         int
}

// runCodeWS runs code as CodeInterpreterService.RunCode does: the request
// as the first message, then messages to the close.
func runCodeWS(t *testing.T, d *testenv.Daemon, base string, req map[string]any) codeRun {
	t.Helper()
	c := dialToolbox(t, d, base+"/process/interpreter/execute")
	if err := c.WriteJSON(req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	var r codeRun
	for {
		var m struct{ Type, Text, Name, Value, Traceback string }
		if err := c.ReadJSON(&m); err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				r.closeCode = ce.Code
				return r
			}
			t.Fatalf("run code: %v", err)
		}
		switch m.Type {
		case "stdout":
			r.stdout += m.Text
		case "stderr":
			r.stderr += m.Text
		case "error":
			r.errName, r.errValue, r.traceback = m.Name, m.Value, m.Traceback
		}
	}
}
