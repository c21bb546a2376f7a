package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// execTerminal runs argv in sandbox name on a terminal of the daemon's
// (exec -t), as docker exec -t does: this terminal in raw mode for the
// while (restored at the end, whatever happens), its size the
// command's and followed when it changes, what is typed forwarded with
// interactive, and the command's exit code exec's.
func (c *cli) execTerminal(ctx context.Context, name string, req wire.ExecRequest, interactive bool) error {
	in, _ := c.stdin.(*os.File)
	out, _ := c.stdout.(*os.File)
	if out == nil || !isTerminal(out) || interactive && (in == nil || !isTerminal(in)) {
		return errors.New("exec -t needs a terminal: the input or output is not one (drop -t to run without)")
	}
	cols, rows, _ := term.GetSize(int(out.Fd()))
	env := req.Env
	if t := os.Getenv("TERM"); t != "" {
		if env == nil {
			env = map[string]string{}
		}
		if _, set := env["TERM"]; !set {
			env["TERM"] = t
		}
	}
	cl := c.client()
	t, err := cl.OpenTerminal(ctx, name, wire.TerminalRequest{Argv: req.Argv, Env: env, Dir: req.Dir, Cols: cols, Rows: rows})
	if err != nil {
		return err
	}
	defer cl.CloseTerminal(context.WithoutCancel(ctx), name, t.ID)
	conn, err := cl.AttachTerminal(ctx, name, t.ID)
	if err != nil {
		return err
	}
	defer conn.Close()
	if interactive {
		state, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(in.Fd()), state)
		go func() { _, _ = io.Copy(conn, in) }()
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if cols, rows, err := term.GetSize(int(out.Fd())); err == nil {
				_ = conn.Resize(cols, rows)
			}
		}
	}()
	if _, err := io.Copy(out, conn); err != nil {
		return err
	}
	if code, ok := conn.ExitCode(); ok && code != 0 {
		return exitError(code)
	}
	return nil
}
