package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// maxExecStdin is how much of its input exec forwards (the API's body
// bound, less room for the rest).
const maxExecStdin = wire.MaxBodyBytes - 64<<10

// execCommand runs a command inside a sandbox: its exit code is exec's,
// its stdout and stderr are exec's, and exec's input, when it is not a
// terminal, is its input.
func execCommand() command {
	var timeout time.Duration
	var dir string
	var interactive, tty bool
	env := kvFlag{}
	return command{
		name: "exec", args: "NAME [--] COMMAND [ARG...]", summary: "run a command inside a sandbox (its exit code passed through); exec's flags go before NAME, everything after it is the command", minArgs: 2, maxArgs: -1, client: true, names: 1, commandAfterName: true,
		flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&timeout, "timeout", 0, "kill the command after this `duration` (default the daemon's 10m)")
			fs.StringVar(&dir, "dir", "", "working `directory` as the sandbox sees it (default its workspace)")
			fs.Var(env, "env", "`KEY=VALUE` added to its environment (repeatable)")
			fs.BoolVarP(&interactive, "interactive", "i", false, "forward this input to the command (with -t: what is typed)")
			fs.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal, sized as this one")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			name, argv := args[0], args[1:]
			if len(argv) > 0 && argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usageError{cmd: "exec", msg: "no command: exec NAME -- COMMAND [ARG...]"}
			}
			req := wire.ExecRequest{Argv: argv, Dir: dir, TimeoutMs: timeout.Milliseconds()}
			if len(env) > 0 {
				req.Env = env
			}
			if tty {
				return c.execTerminal(ctx, name, req, interactive)
			}
			if f, ok := c.stdin.(*os.File); c.stdin != nil && (interactive || !ok || !isTerminal(f)) {
				b, err := io.ReadAll(io.LimitReader(c.stdin, maxExecStdin+1))
				if err != nil {
					return err
				}
				if len(b) > maxExecStdin {
					return fmt.Errorf("exec forwards at most %d bytes of input; use cp for a file", maxExecStdin)
				}
				req.Stdin = string(b)
			}
			if c.json {
				// One object: how it ended and what it wrote.
				out, err := c.client().Exec(ctx, name, req)
				if err != nil {
					return err
				}
				c.printJSON(out)
				return exitErrorOrNil(out.ExitCode)
			}
			// Streamed: both outputs as the command writes them.
			out, err := c.client().ExecStream(ctx, name, req, func(stderr bool, text string) error {
				w := c.stdout
				if stderr {
					w = c.stderr
				}
				_, err := io.WriteString(w, text)
				return err
			})
			var ae *client.Error
			if errors.As(err, &ae) && ae.Code == string(wire.CodeProgramNotFound) {
				fmt.Fprintln(c.stderr, "agent-control-plane: "+inert(ae.Message))
				return exitError(127) // as a shell says "command not found"
			}
			if err != nil {
				return err
			}
			switch {
			case out.Reason == "timeout":
				fmt.Fprintf(c.stderr, "agent-control-plane: killed after its timeout\n")
				return exitError(124) // as timeout(1)
			case out.ExitCode != 0:
				return exitError(out.ExitCode)
			}
			return nil
		},
	}
}

// exitErrorOrNil is exit code n as exec's own: nil for 0.
func exitErrorOrNil(n int) error {
	if n == 0 {
		return nil
	}
	return exitError(n)
}

// shellCommand is a shell inside a sandbox without a terminal: a session
// whose state (cd, export) persists from line to line, read until EOF.
func shellCommand() command {
	return command{
		name: "shell", args: "NAME", summary: "a shell session inside a sandbox, a line at a time (cd and export persist), until EOF", minArgs: 1, maxArgs: 1, client: true, noJSON: true, names: 1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			cl := c.client()
			sb, err := cl.Get(ctx, args[0])
			if err != nil {
				return err
			}
			name := fmt.Sprintf("cli-%d", os.Getpid())
			if _, err := cl.CreateSession(ctx, sb.ID, name); err != nil {
				return err
			}
			defer cl.DeleteSession(context.WithoutCancel(ctx), sb.ID, name)
			fmt.Fprintf(c.stderr, "A shell in %s, in %s, without a terminal: a line at a time; end with Ctrl-D.\n", inert(sb.ID), inert(sb.Workspace))
			in := bufio.NewScanner(c.stdin)
			in.Buffer(make([]byte, 64<<10), 64<<10)
			last := 0
			for {
				fmt.Fprintf(c.stderr, "%s$ ", inert(sb.ID))
				if !in.Scan() {
					fmt.Fprintln(c.stderr)
					if err := in.Err(); err != nil {
						return err
					}
					return exitErrorOrNil(last)
				}
				line := strings.TrimSpace(in.Text())
				if line == "" {
					continue
				}
				out, err := cl.SessionExec(ctx, sb.ID, name, line)
				var ae *client.Error
				if errors.As(err, &ae) && ae.Code == string(wire.CodeNotFound) {
					if now, gerr := cl.Get(ctx, sb.ID); gerr == nil && wire.Live(now.State) {
						// The sandbox runs, its session is gone: its shell
						// ended (an exit typed), its status the last
						// command's, as with sh -s.
						fmt.Fprintln(c.stderr)
						return exitErrorOrNil(last)
					}
				}
				if err != nil {
					return err
				}
				io.WriteString(c.stdout, out.Stdout)
				io.WriteString(c.stderr, out.Stderr)
				last = out.ExitCode
			}
		},
	}
}
