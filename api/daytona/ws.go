package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Daytona's toolbox streams over WebSockets: a PTY's connection, a
// followed log, the interpreter. coder/websocket (the library Coder's
// own terminals run on; net/http's hijacking, no goroutine of its own per
// connection) speaks it; Daytona's SDKs dial with gorilla's client.

// Bounds of one WebSocket.
const (
	// wsReadLimit bounds one message a client sends (typed input, code).
	wsReadLimit = 1 << 20
	// wsWriteTimeout bounds one message's write: a client that stops
	// reading is let go.
	wsWriteTimeout = 10 * time.Second
	// maxCloseReason is the most a close frame's reason may hold.
	maxCloseReason = 123
)

// isWebSocket reports whether r asks to switch to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// accept switches r's connection to a WebSocket; the host has checked its
// origin and credentials already. The connection keeps no deadline of
// the request's: a terminal may sit idle.
func accept(w http.ResponseWriter, r *http.Request) (*websocket.Conn, bool) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The host's guard allowed this origin (a localhost one or none).
		InsecureSkipVerify: true,
	})
	if err != nil {
		return nil, false // Accept answered the client
	}
	c.SetReadLimit(wsReadLimit)
	return c, true
}

// wsWrite sends one message, bounded by wsWriteTimeout.
func wsWrite(ctx context.Context, c *websocket.Conn, typ websocket.MessageType, p []byte) error {
	ctx, cancel := context.WithTimeout(ctx, wsWriteTimeout)
	defer cancel()
	return c.Write(ctx, typ, p)
}

// wsWriteJSON sends v as one text message.
func wsWriteJSON(ctx context.Context, c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return wsWrite(ctx, c, websocket.MessageText, b)
}

// closeReason is v as a close frame's reason: JSON within its bound.
func closeReason(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > maxCloseReason {
		return ""
	}
	return string(b)
}
