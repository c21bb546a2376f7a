package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The client commands: each talks to the daemon through c.client().

func lsCommand() command {
	labels := kvFlag{}
	var quiet bool
	var states []string
	return command{
		name: "ls", summary: "list sandboxes", maxArgs: 0, client: true,
		flags: func(fs *flag.FlagSet) {
			fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable; all must match)")
			fs.BoolVar(&quiet, "q", false, "print names only, one per line (for scripts: xargs agent-control-plane rm)")
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
		flags: func(fs *flag.FlagSet) {
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
		name: "get", args: "NAME", summary: "show one sandbox", minArgs: 1, maxArgs: 1, client: true,
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
		name: "stop", args: "NAME", summary: "stop a sandbox (start starts it again, its files kept)", minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&force, "force", false, "kill at once, skipping the grace period")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			sb, err := c.stop(ctx, c.client(), args[0], force)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(sb)
			} else {
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
		name: name, args: "NAME", summary: summary, minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *flag.FlagSet) { waitFlags(fs, &wait, &timeout) },
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
func (c *cli) stop(ctx context.Context, cl *client.Client, id string, force bool) (wire.SandboxInfo, error) {
	done := func() {}
	if !force && !c.json {
		cur, err := cl.Get(ctx, id)
		if err != nil {
			return wire.SandboxInfo{}, err
		}
		done = c.progress(fmt.Sprintf("Stopping sandbox %s: SIGTERM, then SIGKILL after %s if it has not exited", inert(cur.ID), c.graceOf(ctx, cl, cur)))
	}
	sb, err := cl.Stop(ctx, id, force)
	done()
	return sb, err
}

// waitFlags registers --wait and --timeout (create, start, restart).
func waitFlags(fs *flag.FlagSet, wait *bool, timeout *time.Duration) {
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
		name: "rm", args: "NAME...", summary: "delete sandboxes", minArgs: 1, maxArgs: -1, client: true,
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
		flags: func(fs *flag.FlagSet) {
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
					return usagef("prune", "%d stopped sandboxes would be deleted; add --yes to do it without a terminal to ask at", len(stale))
				}
				fmt.Fprintf(c.stdout, "Delete %d stopped sandboxes (%s)? [y/N] ", len(stale), inert(strings.Join(stale, ", ")))
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

func logsCommand() command {
	var (
		follow, stamps, stdout, stderr bool
		opts                           client.LogsOptions
	)
	return command{
		name: "logs", args: "NAME", summary: "print a sandbox's entrypoint logs (redacted), both streams in write order; -f follows them", minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&follow, "f", false, "follow: print lines as they are written, until the sandbox stops (or Ctrl-C)")
			fs.BoolVar(&follow, "follow", false, "same as -f")
			fs.IntVar(&opts.Lines, "n", 0, "only the last `N` lines (of both streams)")
			fs.IntVar(&opts.Lines, "tail", 0, "same as -n")
			fs.StringVar(&opts.Since, "since", "", "only lines written since `WHEN`: a duration before now (90s, 10m, 1h30m) or a time (2026-12-01T15:04:05Z, 2026-12-01T15:04:05, 2026-12-01)")
			fs.BoolVar(&stamps, "t", false, "print each line after the time it was written (RFC 3339, UTC)")
			fs.BoolVar(&stamps, "timestamps", false, "same as -t")
			fs.BoolVar(&stdout, "stdout", false, "only the sandbox's stdout")
			fs.BoolVar(&stderr, "stderr", false, "only the sandbox's stderr")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			switch {
			case stdout && stderr:
				return usagef("logs", "--stdout and --stderr together are both streams: give neither")
			case stdout:
				opts.Stream = "stdout"
			case stderr:
				opts.Stream = "stderr"
			}
			if opts.Lines < 0 {
				return usagef("logs", "-n takes a number of lines ≥ 1")
			}
			cl := c.client()
			// Each stream's lines go to the same stream here; with -t a line
			// starts with its time (a long line comes in pieces: only its
			// first is stamped).
			midLine := map[string]bool{}
			print := func(stream, at, text string) error {
				w := c.stdout
				if stream == "stderr" {
					w = c.stderr
				}
				if stamps && !midLine[stream] {
					io.WriteString(w, at+" ")
				}
				midLine[stream] = !strings.HasSuffix(text, "\n")
				_, err := io.WriteString(w, inertLog(text))
				return err
			}
			if follow {
				// With --json, one JSON object per chunk: {"stream","time","text"}.
				enc := json.NewEncoder(c.stdout)
				sb, err := cl.FollowLogs(ctx, args[0], opts, func(stream string, chunk wire.LogChunk) error {
					if c.json {
						return enc.Encode(wire.LogLine{Stream: stream, Time: chunk.Time, Text: chunk.Text})
					}
					return print(stream, chunk.Time, chunk.Text)
				})
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return nil // Ctrl-C: following ends, nothing failed
				}
				if err != nil {
					return err
				}
				if !c.json {
					how := ""
					if sb.ErrorReason != nil && *sb.ErrorReason != "" {
						how = ": " + inert(*sb.ErrorReason)
					}
					fmt.Fprintf(c.stderr, "Sandbox %s is %s%s.\n", inert(sb.ID), c.paint(sb.State), how)
				}
				return nil
			}
			opts.Timestamps = stamps
			logs, err := cl.EntrypointLogs(ctx, args[0], opts)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(logs)
				return nil
			}
			for _, l := range logs.Lines {
				if err := print(l.Stream, l.Time, l.Text); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func keepaliveCommand() command {
	var every time.Duration
	return command{
		name: "keepalive", args: "NAME", summary: "refresh a sandbox's activity", minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *flag.FlagSet) {
			intervalFlag(fs, &every, "every", "repeat this often until interrupted (default: once)")
		},
		exec: func(ctx context.Context, c *cli, args []string) error {
			cl := c.client()
			for {
				if err := cl.RefreshActivity(ctx, args[0]); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if c.json {
					c.printJSON(map[string]any{"id": args[0], "refreshedAt": time.Now().UTC().Format(wire.TimeFormat)})
				} else {
					fmt.Fprintf(c.stdout, "Refreshed the activity of %s at %s\n", inert(args[0]), time.Now().Format(time.TimeOnly))
				}
				if every <= 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
}

func autostopCommand() command {
	return command{
		name: "autostop", args: "NAME MINUTES", summary: "set a sandbox's idle auto-stop interval in minutes, or a duration such as 90s (0 disables)",
		minArgs: 2, maxArgs: 2, client: true,
		exec: func(ctx context.Context, c *cli, args []string) error {
			min, err := parseMinutes(args[1])
			if err != nil {
				return usagef("autostop", "MINUTES: %v", err)
			}
			sb, err := c.client().SetAutostopInterval(ctx, args[0], min)
			if err != nil {
				return err
			}
			switch {
			case c.json:
				c.printJSON(sb)
			case min == 0:
				fmt.Fprintf(c.stdout, "Auto-stop off for %s\n", inert(sb.ID))
			default:
				fmt.Fprintf(c.stdout, "%s stops after %s idle minutes (%s)\n", inert(sb.ID), strconv.FormatFloat(min, 'f', -1, 64), autoStopIn(sb, time.Now()))
			}
			return nil
		},
	}
}

func resizeCommand() command {
	var limits wire.Limits
	return command{
		name: "resize", args: "NAME", summary: "change a running sandbox's cpu, memory or pids limit", minArgs: 1, maxArgs: 1, client: true,
		flags: func(fs *flag.FlagSet) { limitFlags(fs, &limits) },
		exec: func(ctx context.Context, c *cli, args []string) error {
			if limits == (wire.Limits{}) {
				return usagef("resize", "give at least one of --cpu, --memory, --pids")
			}
			sb, err := c.client().Resize(ctx, args[0], limits)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(sb)
				return nil
			}
			fmt.Fprintf(c.stdout, "Sandbox %s limits: %s\n", inert(sb.ID), limitsString(sb))
			return nil
		},
	}
}

func snapshotsCommand() command {
	return command{
		name: "snapshots", summary: "list the snapshots creates may name (--snapshot)", client: true,
		exec: func(ctx context.Context, c *cli, _ []string) error {
			list, err := c.client().Snapshots(ctx)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(list)
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRUNTIME\tREADY PATH\tSTARTUP\tSTOP GRACE\tIMAGE\tENV")
			for _, s := range list {
				name := inert(s.Name)
				if s.Default {
					name += " (default)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, inert(s.Runtime), inert(s.ReadyPath),
					time.Duration(s.StartupTimeoutMs)*time.Millisecond, time.Duration(s.StopGraceMs)*time.Millisecond,
					inert(cmp.Or(s.Image, "-")), inert(cmp.Or(strings.Join(s.EnvKeys, ","), "-")))
			}
			return tw.Flush()
		},
	}
}

func infoCommand() command {
	return command{
		name: "info", summary: "show the daemon's identity", client: true,
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cl := c.client()
			info, err := cl.Info(ctx)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(info)
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "URL:\t%s\nVersion:\t%s (API %s)\nPID:\t%d\nUp:\t%s\nRoot:\t%s\nPorts:\t%s\nRuntimes:\t%s\n",
				cl.URL(), inert(info.Version), inert(info.APIVersion), info.PID, ago(time.Since(info.StartedAt.Time)),
				inert(info.Root), inert(info.PortRange), inert(strings.Join(info.Runtimes, ", ")))
			for _, name := range info.Runtimes {
				if why, down := info.Unavailable[name]; down {
					fmt.Fprintf(tw, "  %s:\tunavailable: %s\n", inert(name), inert(why))
				}
			}
			if cg := info.Cgroups; cg != nil {
				line := cg.Mode
				if len(cg.Limits) > 0 {
					line += ", limits " + strings.Join(cg.Limits, ", ")
				}
				if cg.Note != "" {
					line += " (" + cg.Note + ")"
				}
				fmt.Fprintf(tw, "Cgroups:\t%s\n", inert(line))
			}
			tw.Flush()
			return nil
		},
	}
}

// stateWidth is the widest state or event word watch prints.
const stateWidth = len("destroyed")

func watchCommand() command {
	labels := kvFlag{}
	return command{
		name: "watch", summary: "follow sandbox events live", client: true,
		flags: func(fs *flag.FlagSet) {
			fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cl := c.client()
			if _, err := cl.Info(ctx); err != nil {
				return err
			}
			enc := json.NewEncoder(c.stdout)
			return cl.Watch(ctx, labels, func(ev wire.StreamEvent) error {
				if c.json {
					return enc.Encode(ev)
				}
				c.watchLine(ev)
				return nil
			})
		},
	}
}

// watchLine prints one event as text, aligned whether coloured or not.
func (c *cli) watchLine(ev wire.StreamEvent) {
	ts := ev.Time.Local().Format("15:04:05.000")
	if ev.Type == wire.EventReplaced {
		fmt.Fprintf(c.stdout, "%s  %d sandboxes\n", ts, len(ev.Sandboxes))
		for _, sb := range ev.Sandboxes {
			fmt.Fprintf(c.stdout, "%s  %s %s  port %d\n", ts, c.paintPad(inert(sb.State), stateWidth), inert(sb.ID), sb.Port)
		}
		return
	}
	sb := ev.Sandbox
	line := fmt.Sprintf("%s  %s %s  port %d", ts, c.paintPad(inert(strings.TrimPrefix(ev.Type, "sandbox.")), stateWidth), inert(sb.ID), sb.Port)
	if r := reason(*sb); r != "" {
		line += "  (" + r + ")"
	}
	fmt.Fprintln(c.stdout, line)
}
