package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The sandbox commands (ls, create, get, stop, start, restart, rm,
// prune): each talks to the daemon through c.client().

func lsCommand() command {
	labels := kvFlag{}
	var quiet bool
	var states []string
	return command{
		name: "ls", summary: "list sandboxes", maxArgs: 0, client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable; all must match)")
			fs.BoolVarP(&quiet, "quiet", "q", false, "print names only, one per line (for scripts: xargs agent-control-plane rm)")
			fs.Func("state", "only sandboxes in this `state`: starting, started or stopped (repeatable)", func(s string) error {
				switch s {
				case wire.StateStarting, wire.StateStarted, wire.StateStopped:
					states = append(states, s)
					return nil
				}
				return fmt.Errorf("want starting, started or stopped, got %q", s)
			})
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			list, err := c.client().ListAll(ctx, client.ListOptions{Labels: labels, States: states})
			if err != nil {
				return err
			}
			switch {
			case c.json:
				c.printJSON(list)
			case quiet:
				for _, sb := range list {
					fmt.Fprintln(c.stdout, inert(sb.ID))
				}
			case len(list) == 0 && (len(labels) > 0 || len(states) > 0):
				fmt.Fprintln(c.stdout, "No sandboxes match.")
			case len(list) == 0:
				fmt.Fprintln(c.stdout, "No sandboxes. Create one with: agent-control-plane create NAME")
			default:
				c.table(list)
			}
			return nil
		},
	}
}

func createCommand() command {
	labels, env := kvFlag{}, kvFlag{}
	var autostop *float64
	var wait bool
	var runtime, snapshot string
	var limits wire.Limits
	var timeout time.Duration
	return command{
		name: "create", args: "NAME", summary: "create a sandbox", minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.Var(labels, "label", "label `k=v` (repeatable)")
			fs.Var(env, "env", "environment variable `K=V` for the agent-server (repeatable)")
			minutesFlag(fs, &autostop)
			waitFlags(fs, &wait, &timeout)
			fs.StringVar(&runtime, "runtime", "", "the `runtime` to run it (agent-control-plane info lists them; default: the daemon's first)")
			fs.StringVar(&snapshot, "snapshot", "", "the `snapshot` to run (agent-control-plane snapshots lists them); for docker, also an image")
			limitFlags(fs, &limits)
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			req := wire.CreateSandboxRequest{Name: args[0], Labels: labels, EnvVars: env, Runtime: runtime, Snapshot: snapshot, Limits: limits, AutoStopInterval: autostop}
			cl := c.client()
			sb, err := cl.Create(ctx, req)
			if err != nil {
				return err
			}
			return c.started(ctx, cl, "Created", sb, wait, timeout)
		},
	}
}

func getCommand() command {
	return command{
		name: "get", args: "NAME", summary: "show one sandbox", minArgs: 1, maxArgs: 1, client: true, names: 1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			sb, err := c.client().Get(ctx, args[0])
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(sb)
			} else {
				c.describe(sb)
			}
			return nil
		},
	}
}

func stopCommand() command {
	var force bool
	return command{
		name: "stop", args: "NAME", summary: "stop a sandbox (start starts it again, its files kept)", minArgs: 1, maxArgs: 1, client: true, names: 1,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&force, "force", false, "kill at once, skipping the grace period")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			sb, err := c.stop(ctx, c.client(), args[0], force)
			if err != nil {
				return err
			}
			switch {
			case c.json:
				c.printJSON(sb)
			case sb.already:
				fmt.Fprintf(c.stdout, "Sandbox %s is %s already\n", inert(sb.ID), inert(sb.State))
			default:
				fmt.Fprintf(c.stdout, "Stopped %s\n", inert(sb.ID))
			}
			return nil
		},
	}
}

// startCommand starts a stopped sandbox again; restartCommand stops it
// first. Both keep its workspace, labels, variables and limits.
func startCommand(restart bool) command {
	var wait bool
	var timeout time.Duration
	name, summary := "start", "start a stopped sandbox again, in place (its files kept)"
	if restart {
		name, summary = "restart", "stop a sandbox and start it again, in place (its files kept)"
	}
	return command{
		name: name, args: "NAME", summary: summary, minArgs: 1, maxArgs: 1, client: true, names: 1,
		flags: func(fs *pflag.FlagSet) { waitFlags(fs, &wait, &timeout) },
		exec: func(ctx context.Context, c *cli, args []string) error {
			cl := c.client()
			if restart {
				if _, err := c.stop(ctx, cl, args[0], false); err != nil {
					return err
				}
			}
			sb, err := cl.Start(ctx, args[0])
			if err != nil {
				return err
			}
			return c.started(ctx, cl, "Started", sb, wait, timeout)
		},
	}
}

// stop stops sandbox id; a polite stop may wait the whole grace for a
// child that ignores SIGTERM, so it says so rather than sit silent, once
// the sandbox is known to exist, with its own snapshot's grace.
func (c *cli) stop(ctx context.Context, cl *client.Client, id string, force bool) (stopped, error) {
	done := func() {}
	if !c.json {
		cur, err := cl.Get(ctx, id)
		if err != nil {
			return stopped{}, err
		}
		if !wire.Live(cur.State) {
			return stopped{cur, true}, nil // nothing to stop
		}
		if !force {
			done = c.progress(fmt.Sprintf("Stopping sandbox %s: SIGTERM, then SIGKILL after %s if it has not exited", inert(cur.ID), c.graceOf(ctx, cl, cur)))
		}
	}
	sb, err := cl.Stop(ctx, id, force)
	done()
	return stopped{SandboxInfo: sb}, err
}

// stopped is a sandbox after a stop, and whether it was stopped already.
type stopped struct {
	wire.SandboxInfo
	already bool
}

// waitFlags registers --wait and --timeout (create, start, restart).
func waitFlags(fs *pflag.FlagSet, wait *bool, timeout *time.Duration) {
	fs.BoolVar(wait, "wait", false, "wait until the daemon says it started (its ready path answered) or stopped")
	fs.DurationVar(timeout, "timeout", 0, "with --wait, how long (default: the daemon's startup timeout + 15s)")
}

// started reports a sandbox just created or started (verb), after
// waiting for it with wait.
func (c *cli) started(ctx context.Context, cl *client.Client, verb string, sb wire.SandboxInfo, wait bool, timeout time.Duration) error {
	if wait {
		var err error
		if sb, err = c.waitStarted(ctx, cl, sb, timeout); err != nil {
			return err
		}
	}
	if c.json {
		c.printJSON(sb)
		return nil
	}
	fmt.Fprintf(c.stdout, "%s sandbox %s (%s) on port %d: %s\n", verb, inert(sb.ID), c.paint(sb.State), sb.Port, inert(sb.PreviewURL))
	return nil
}

// graceOf is how long a stop of sb waits after SIGTERM: its snapshot's
// stop_grace, else the daemon's.
func (c *cli) graceOf(ctx context.Context, cl *client.Client, sb wire.SandboxInfo) string {
	ms := int64(0)
	if sb.Snapshot != "" {
		if snaps, err := cl.Snapshots(ctx); err == nil {
			for _, s := range snaps {
				if s.Name == sb.Snapshot {
					ms = s.StopGraceMs
				}
			}
		}
	}
	if ms == 0 {
		if info, err := cl.Info(ctx); err == nil {
			ms = info.StopGraceMs
		}
	}
	if ms == 0 {
		return "the daemon's grace period"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func rmCommand() command {
	return command{
		name: "rm", args: "NAME...", summary: "delete sandboxes", minArgs: 1, maxArgs: -1, client: true, names: -1,
		exec: func(ctx context.Context, c *cli, args []string) error {
			// DELETE succeeds for a name that does not exist (it is
			// idempotent); a person typing a name wants to know.
			return c.deleteAll(ctx, args, true)
		},
	}
}

func pruneCommand() command {
	var olderThan time.Duration
	var yes bool
	return command{
		name: "prune", summary: "delete stopped sandboxes (asks first unless --yes)", client: true,
		flags: func(fs *pflag.FlagSet) {
			intervalFlag(fs, &olderThan, "older-than", "only those stopped at least this long ago")
			fs.BoolVar(&yes, "yes", false, "do not ask")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			stopped, err := c.client().ListAll(ctx, client.ListOptions{States: []string{wire.StateStopped}})
			if err != nil {
				return err
			}
			var stale []string
			now := time.Now()
			for _, sb := range stopped {
				if sb.StoppedAt == nil || now.Sub(sb.StoppedAt.Time) >= olderThan {
					stale = append(stale, sb.ID)
				}
			}
			if len(stale) == 0 {
				if c.json {
					c.printJSON(map[string][]string{"deleted": {}})
				} else {
					fmt.Fprintln(c.stdout, "Nothing to prune.")
				}
				return nil
			}
			if !yes {
				if !isTerminal(c.stdout) || c.json {
					return usagef("prune", "%s would be deleted; add --yes to do it without a terminal to ask at", plural(int64(len(stale)), "stopped sandbox"))
				}
				fmt.Fprintf(c.stdout, "Delete %s (%s)? [y/N] ", plural(int64(len(stale)), "stopped sandbox"), inert(strings.Join(stale, ", ")))
				var answer string
				fmt.Fscanln(c.stdin, &answer)
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					fmt.Fprintln(c.stdout, "Nothing deleted.")
					return nil
				}
			}
			return c.deleteAll(ctx, stale, false)
		},
	}
}

// deleteAll deletes ids, saying so for each (with --json, one
// {"deleted":[…]} at the end), and fails if any failed. With mustExist a
// name that does not exist is an error, not a silent success.
func (c *cli) deleteAll(ctx context.Context, ids []string, mustExist bool) error {
	cl := c.client()
	var failed error
	deleted := []string{}
	for _, id := range ids {
		done := func() {}
		if mustExist {
			cur, err := cl.Get(ctx, id)
			if err != nil {
				failed = exitError(c.fail(err))
				continue
			}
			if wire.Live(cur.State) && !c.json {
				// A delete stops a running sandbox first: say so, and
				// what it may wait for.
				done = c.progress(fmt.Sprintf("Sandbox %s is running: stopping it first (SIGTERM, then SIGKILL after %s if it has not exited)", inert(cur.ID), c.graceOf(ctx, cl, cur)))
			}
		}
		err := cl.Delete(ctx, id)
		done()
		if err != nil {
			failed = exitError(c.fail(err))
			continue
		}
		deleted = append(deleted, id)
		if !c.json {
			fmt.Fprintf(c.stdout, "Deleted %s\n", inert(id))
		}
	}
	if c.json {
		c.printJSON(map[string][]string{"deleted": deleted})
	}
	return failed
}
