// Package wsock is the daemon's WebSocket plumbing, one for every face:
// switching a request over, bounded writes, close reasons, and the pump
// between a terminal and a client.
//
// coder/websocket speaks the protocol (net/http hijacking, context-based,
// no goroutine of its own per connection); Daytona's SDKs dial with
// gorilla's client, which the tests use too.
package wsock

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// Bounds of one WebSocket.
const (
	// ReadLimit bounds one message a client sends (typed input, code).
	ReadLimit = 1 << 20
	// WriteTimeout bounds one message's write: a client that stops
	// reading is let go.
	WriteTimeout = 10 * time.Second
	// maxCloseReason is the most a close frame's reason may hold.
	maxCloseReason = 123
)

// IsUpgrade reports whether r asks to switch to a WebSocket.
func IsUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// Accept switches r's connection to a WebSocket; the host has checked its
// origin and credentials already. The connection keeps no deadline of
// the request's: a terminal may sit idle.
func Accept(w http.ResponseWriter, r *http.Request) (*websocket.Conn, bool) {
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
	c.SetReadLimit(ReadLimit)
	return c, true
}

// Write sends one message, bounded by WriteTimeout.
func Write(ctx context.Context, c *websocket.Conn, typ websocket.MessageType, p []byte) error {
	ctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()
	return c.Write(ctx, typ, p)
}

// WriteJSON sends v as one text message.
func WriteJSON(ctx context.Context, c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(ctx, c, websocket.MessageText, b)
}

// CloseReason is v as a close frame's reason: JSON within its bound.
func CloseReason(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > maxCloseReason {
		return ""
	}
	return string(b)
}
