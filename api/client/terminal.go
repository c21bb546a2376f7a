package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// OpenTerminal opens a terminal in a running sandbox: req's command (or
// its shell) on a pseudo-terminal, started when AttachTerminal attaches.
func (c *Client) OpenTerminal(ctx context.Context, id string, req wire.TerminalRequest) (wire.Terminal, error) {
	var out wire.Terminal
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/terminals", req, &out)
	return out, err
}

// CloseTerminal ends a terminal's command.
func (c *Client) CloseTerminal(ctx context.Context, id, terminal string) error {
	return c.do(ctx, c.timeout, "DELETE", "/v1/sandboxes/"+esc(id)+"/terminals/"+esc(terminal), nil, nil)
}

// TerminalConn is a client attached to a terminal: Read is its output
// (io.EOF once its command has ended; ExitCode then says how), Write is
// typed in.
type TerminalConn struct {
	ws   *websocket.Conn
	ctx  context.Context
	mu   sync.Mutex
	rest []byte
	exit *int
	err  error
}

// AttachTerminal attaches to terminal of sandbox id over a WebSocket; its
// command starts if it waits. ctx bounds the whole attachment.
func (c *Client) AttachTerminal(ctx context.Context, id, terminal string) (*TerminalConn, error) {
	req, _ := http.NewRequest("GET", c.base, nil)
	c.authorize(req)
	url := "ws" + strings.TrimPrefix(c.base, "http") + "/v1/sandboxes/" + esc(id) + "/terminals/" + esc(terminal) + "/attach"
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: req.Header})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			b := make([]byte, 1<<16)
			n, _ := resp.Body.Read(b)
			return nil, c.answerError(resp, b[:n])
		}
		return nil, c.transportError(err)
	}
	ws.SetReadLimit(1 << 20)
	t := &TerminalConn{ws: ws, ctx: ctx}
	var ctrl struct{ Type, Status, Error string }
	typ, p, err := ws.Read(ctx)
	if err != nil || typ != websocket.MessageText || json.Unmarshal(p, &ctrl) != nil || ctrl.Status != "connected" {
		ws.CloseNow()
		if ctrl.Error != "" {
			return nil, errors.New(ctrl.Error)
		}
		return nil, fmt.Errorf("the daemon did not attach the terminal: %v", err)
	}
	return t, nil
}

// Read reads the terminal's output.
func (t *TerminalConn) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.rest) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		typ, msg, err := t.ws.Read(t.ctx)
		if err != nil {
			t.err = t.ended(err)
			continue
		}
		if typ == websocket.MessageBinary {
			t.rest = msg
		}
	}
	n := copy(p, t.rest)
	t.rest = t.rest[n:]
	return n, nil
}

// ended is the error Read keeps returning once the connection has ended:
// io.EOF after a normal close, whose reason holds the exit code.
func (t *TerminalConn) ended(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure {
		var exit struct {
			ExitCode *int `json:"exitCode"`
		}
		if json.Unmarshal([]byte(ce.Reason), &exit) == nil {
			t.exit = exit.ExitCode
		}
		return io.EOF
	}
	return err
}

// Write types p into the terminal.
func (t *TerminalConn) Write(p []byte) (int, error) {
	if err := t.ws.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (t *TerminalConn) Resize(cols, rows int) error {
	b, _ := json.Marshal(wire.TerminalResize{Type: "resize", Cols: cols, Rows: rows})
	return t.ws.Write(t.ctx, websocket.MessageText, b)
}

// ExitCode is the command's exit code once Read has returned io.EOF
// (false before, or when the daemon did not say).
func (t *TerminalConn) ExitCode() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil {
		return 0, false
	}
	return *t.exit, true
}

// Close lets the terminal go (its command runs on until CloseTerminal).
func (t *TerminalConn) Close() error {
	return t.ws.Close(websocket.StatusNormalClosure, "")
}
