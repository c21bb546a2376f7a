package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// Exec runs a command inside a running sandbox and returns how it ended
// and what it wrote (the last MiB of each stream). It waits as long as
// the command may run (req.TimeoutMs, or the daemon's 10 minutes) and a
// little more; cancel ctx to kill it.
func (c *Client) Exec(ctx context.Context, id string, req wire.ExecRequest) (wire.ExecResponse, error) {
	var out wire.ExecResponse
	wait := 10 * time.Minute
	if req.TimeoutMs > 0 {
		wait = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	err := c.do(ctx, wait+c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/exec", req, &out)
	return out, err
}

// ExecStream runs a command inside a running sandbox as Exec does, but
// passes out its output as the command writes it (stderr true for its
// stderr; each piece redacted), and returns how it ended (ExitCode,
// Signal, Reason; no output). Cancel ctx to kill it.
func (c *Client) ExecStream(ctx context.Context, id string, req wire.ExecRequest, out func(stderr bool, text string) error) (wire.ExecResponse, error) {
	er, closeStream, err := c.openStreamWith(ctx, "POST", "/v1/sandboxes/"+esc(id)+"/exec", req, "")
	if err != nil {
		return wire.ExecResponse{}, err
	}
	defer closeStream()
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return wire.ExecResponse{}, errors.New("the daemon ended the command's stream before its end (it may be restarting)")
		}
		if err != nil {
			if ctx.Err() != nil {
				return wire.ExecResponse{}, ctx.Err()
			}
			return wire.ExecResponse{}, c.transportError(err)
		}
		switch ev.Type {
		case wire.ExecEventExit:
			var x wire.ExecResponse
			if err := json.Unmarshal(ev.Data, &x); err != nil {
				return x, fmt.Errorf("decode the command's end: %w", err)
			}
			return x, nil
		case wire.ExecEventStdout, wire.ExecEventStderr:
			var chunk wire.ExecChunk
			if err := json.Unmarshal(ev.Data, &chunk); err != nil {
				return wire.ExecResponse{}, fmt.Errorf("decode output: %w", err)
			}
			if err := out(ev.Type == wire.ExecEventStderr, chunk.Text); err != nil {
				return wire.ExecResponse{}, err
			}
		}
	}
}

// Files lists a directory of a running sandbox (a path as the workload
// sees it; "" is its workspace).
func (c *Client) Files(ctx context.Context, id, path string) ([]wire.FileEntry, error) {
	var out wire.FileList
	err := c.do(ctx, c.timeout, "GET", "/v1/sandboxes/"+esc(id)+"/files?path="+url.QueryEscape(path), nil, &out)
	return out.Items, err
}

// ReadFile streams a file of a running sandbox to w and returns its
// size.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/sandboxes/"+esc(id)+"/files/content?path="+url.QueryEscape(path), nil)
	if err != nil {
		return 0, err
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, c.answerError(resp, b)
	}
	return io.Copy(w, resp.Body)
}

// WriteFile replaces (or creates, with mode) a file of a running sandbox
// with what r gives, atomically.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode uint32) error {
	target := "/v1/sandboxes/" + esc(id) + "/files/content?path=" + url.QueryEscape(path)
	if mode != 0 {
		target += fmt.Sprintf("&mode=%04o", mode&0o777)
	}
	req, err := http.NewRequestWithContext(ctx, "PUT", c.base+target, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.answerError(resp, b)
	}
	return nil
}

// Stat describes what is at path in a sandbox, running or stopped (a
// link described, not followed); nothing there is a not_found *Error.
func (c *Client) Stat(ctx context.Context, id, path string) (wire.FileEntry, error) {
	var out wire.FileEntry
	err := c.do(ctx, c.timeout, "GET", "/v1/sandboxes/"+esc(id)+"/files/stat?path="+url.QueryEscape(path), nil, &out)
	return out, err
}

// GetArchive streams path of a sandbox, running or stopped (a file, or a
// directory with everything beneath it) to w as a tar, entries named
// from path's last element on, as docker cp reads them.
func (c *Client) GetArchive(ctx context.Context, id, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/sandboxes/"+esc(id)+"/archive?path="+url.QueryEscape(path), nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.answerError(resp, b)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// PutArchive extracts the tar r gives beneath dir of a sandbox, running
// or stopped (made with its parents when missing), and says what it
// made.
func (c *Client) PutArchive(ctx context.Context, id, dir string, r io.Reader) (wire.Extracted, error) {
	var out wire.Extracted
	req, err := http.NewRequestWithContext(ctx, "PUT", c.base+"/v1/sandboxes/"+esc(id)+"/archive?path="+url.QueryEscape(dir), r)
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return out, c.transportError(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return out, c.answerError(resp, b)
	}
	return out, json.Unmarshal(b, &out)
}

// CreateSession starts a shell session named name inside a running
// sandbox: what one command changes of its state, the next one sees.
func (c *Client) CreateSession(ctx context.Context, id, name string) (wire.Session, error) {
	var out wire.Session
	err := c.do(ctx, c.timeout, "POST", "/v1/sandboxes/"+esc(id)+"/sessions", wire.CreateSessionRequest{Name: name}, &out)
	return out, err
}

// SessionExec runs a command line in a session and returns once it has
// ended (cancel ctx to stop waiting; the command goes on in the session).
func (c *Client) SessionExec(ctx context.Context, id, session, line string) (wire.SessionExecResponse, error) {
	var out wire.SessionExecResponse
	err := c.do(ctx, 24*time.Hour, "POST", "/v1/sandboxes/"+esc(id)+"/sessions/"+esc(session)+"/exec", wire.SessionExecRequest{Command: line}, &out)
	return out, err
}

// DeleteSession ends a session and what runs in it.
func (c *Client) DeleteSession(ctx context.Context, id, session string) error {
	return c.do(ctx, c.timeout, "DELETE", "/v1/sandboxes/"+esc(id)+"/sessions/"+esc(session), nil, nil)
}

// SplitSandboxPath reads NAME:PATH (cp's form); ok is false for a local
// path.
func SplitSandboxPath(s string) (name, path string, ok bool) {
	name, path, ok = strings.Cut(s, ":")
	if !ok || name == "" || strings.ContainsRune(name, '/') {
		return "", "", false
	}
	return name, path, true
}
