package wsock

import (
	"context"

	"github.com/coder/websocket"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Control is a control message on a terminal's WebSocket (Daytona's PTY
// protocol).
type Control struct {
	Type   string `json:"type"` // "control"
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Exit is a terminal's close reason.
type Exit struct {
	ExitCode   int    `json:"exitCode"`
	ExitReason string `json:"exitReason,omitempty"`
}

// ServeTerminal serves terminal t to client c as Daytona's PTY protocol
// says, which /v1 speaks too: a control message once attached
// ({"type":"control","status":"connected"}), the output kept so far and
// then as it comes (binary messages), each binary message the client
// sends typed in through input, each text message passed to text (nil:
// typed in too), and at the end a normal close whose reason is Exit.
func ServeTerminal(ctx context.Context, c *websocket.Conn, t *terminal.Terminal, input, text func([]byte) error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kept, at, err := t.Attach()
	if err != nil {
		_ = WriteJSON(ctx, c, Control{Type: "control", Status: "error", Error: err.Error()})
		_ = c.Close(websocket.StatusTryAgainLater, "")
		return
	}
	defer at.Detach()
	if WriteJSON(ctx, c, Control{Type: "control", Status: "connected"}) != nil {
		return
	}
	if len(kept) > 0 && Write(ctx, c, websocket.MessageBinary, kept) != nil {
		return
	}
	if text == nil {
		text = input
	}
	go func() {
		defer cancel()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			handle := input
			if typ == websocket.MessageText {
				handle = text
			}
			if handle(p) != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case p, open := <-at.Output():
			if !open {
				closeTerminal(ctx, c, t, at)
				return
			}
			if Write(ctx, c, websocket.MessageBinary, p) != nil {
				return
			}
		}
	}
}

// closeTerminal ends a terminal's WebSocket once its output has ended:
// with the exit, or saying the client fell behind.
func closeTerminal(ctx context.Context, c *websocket.Conn, t *terminal.Terminal, at *terminal.Attachment) {
	if at.Lagged() {
		_ = c.Close(websocket.StatusPolicyViolation, "the client fell behind the terminal's output; connect again")
		return
	}
	select {
	case <-t.Ended():
	case <-ctx.Done():
		return
	}
	e := t.Exit()
	reason := Exit{ExitCode: e.Code}
	if e.Reason != "" {
		reason.ExitReason = supervisor.Clip(e.Reason, 60)
	}
	_ = c.Close(websocket.StatusNormalClosure, CloseReason(reason))
}
