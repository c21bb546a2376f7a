// Package lsp talks to language servers inside sandboxes: the Language
// Server Protocol's JSON-RPC over a server's stdin and stdout (each
// message after a Content-Length header), for Daytona's toolbox: start,
// open and close documents, their symbols, the workspace's, completions.
package lsp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Servers are the language servers by language id, as Daytona runs
// them.
var Servers = map[string][]string{
	"python":     {"pylsp"},
	"typescript": {"typescript-language-server", "--stdio"},
	"javascript": {"typescript-language-server", "--stdio"},
}

// Bounds of one server.
const (
	// MaxMessage bounds one message from a server.
	MaxMessage = 8 << 20
	// Timeout bounds one request's answer.
	Timeout = 30 * time.Second
)

// ErrEnded: the server has ended (stopped, or it failed).
var ErrEnded = errors.New("the language server has ended")

// MethodNotFound is JSON-RPC's code for a method a server does not offer.
const MethodNotFound = -32601

// Error is an error a server answered.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("the language server answered %d: %s", e.Code, e.Message)
}

// Start runs the server in the sandbox, in its project's directory.
type Start func(stdin io.Reader, stdout io.Writer) (runtime.Process, error)

// Server is one running language server.
type Server struct {
	Language, Project string

	p    runtime.Process
	in   *io.PipeWriter
	wmu  sync.Mutex // one message written at a time
	mu   sync.Mutex
	next int64
	wait map[int64]chan response
	done chan struct{}
}

type response struct {
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// New starts a server and initializes it for project (a directory as the
// sandbox sees it).
func New(ctx context.Context, language, project string, start Start) (*Server, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := start(inR, outW)
	if err != nil {
		return nil, err
	}
	s := &Server{Language: language, Project: project, p: p, in: inW, wait: map[int64]chan response{}, done: make(chan struct{})}
	go func() {
		_, _ = p.Wait(context.Background())
		outW.CloseWithError(ErrEnded)
		inR.CloseWithError(ErrEnded)
	}()
	go s.read(bufio.NewReader(outR))
	root := "file://" + project
	init := map[string]any{"processId": nil, "rootUri": root, "rootPath": project,
		"capabilities":     map[string]any{"textDocument": map[string]any{"documentSymbol": map[string]any{"hierarchicalDocumentSymbolSupport": false}}},
		"workspaceFolders": []map[string]string{{"uri": root, "name": "project"}}}
	if err := s.Call(ctx, "initialize", init, nil); err != nil {
		s.Stop()
		return nil, fmt.Errorf("initialize the language server: %w", err)
	}
	if err := s.Notify("initialized", map[string]any{}); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// read passes each answer to its caller until the server ends.
func (s *Server) read(r *bufio.Reader) {
	defer func() {
		s.mu.Lock()
		close(s.done)
		for id, c := range s.wait {
			close(c)
			delete(s.wait, id)
		}
		s.mu.Unlock()
	}()
	tp := textproto.NewReader(r)
	for {
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		n, err := strconv.Atoi(h.Get("Content-Length"))
		if err != nil || n < 0 || n > MaxMessage {
			return // not the protocol, or past the bound: the server is let go
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		var m struct {
			ID json.RawMessage `json:"id"`
			response
			Method string `json:"method"`
		}
		if json.Unmarshal(body, &m) != nil || len(m.ID) == 0 || string(m.ID) == "null" {
			continue // a notification: nothing to answer
		}
		if m.Method != "" {
			// A request of the server's (configuration, progress):
			// answered at once with nothing, so that it waits for none.
			go s.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": nil}) // not from the reader: it must keep reading
			continue
		}
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		if err != nil {
			continue // not an id of ours
		}
		s.mu.Lock()
		c := s.wait[id]
		delete(s.wait, id)
		s.mu.Unlock()
		if c != nil {
			c <- m.response
		}
	}
}

func (s *Server) write(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := fmt.Fprintf(s.in, "Content-Length: %d\r\n\r\n%s", len(b), b); err != nil {
		return ErrEnded
	}
	return nil
}

// Notify sends a notification.
func (s *Server) Notify(method string, params any) error {
	return s.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// Call sends a request and decodes its result into out (nil: dropped),
// waiting at most Timeout.
func (s *Server) Call(ctx context.Context, method string, params, out any) error {
	c := make(chan response, 1)
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return ErrEnded
	default:
	}
	s.next++
	id := s.next
	s.wait[id] = c
	s.mu.Unlock()
	if err := s.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	select {
	case r, ok := <-c:
		switch {
		case !ok:
			return ErrEnded
		case r.Error != nil:
			return r.Error
		case out != nil && len(r.Result) > 0:
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.wait, id)
		s.mu.Unlock()
		return fmt.Errorf("the language server did not answer %s: %w", method, ctx.Err())
	}
}

// Stop asks the server to shut down and ends it.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	select {
	case <-s.done:
	default:
		_ = s.Call(ctx, "shutdown", nil, nil)
		_ = s.Notify("exit", nil)
	}
	_ = s.p.Kill()
	s.in.Close()
	select { // its reader ends with its output
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}

// Ended is closed once the server has ended.
func (s *Server) Ended() <-chan struct{} { return s.done }
