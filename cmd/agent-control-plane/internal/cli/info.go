package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The commands that show the daemon: snapshots, info, watch.

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
			fmt.Fprintf(tw, "Isolation:\t%s\n", inert(info.Isolation))
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
		flags: func(fs *pflag.FlagSet) {
			fs.Var(labels, "label", "only sandboxes with this label `k=v` (repeatable)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			cl := c.client()
			if _, err := cl.Info(ctx); err != nil {
				return err
			}
			enc := json.NewEncoder(c.stdout)
			return cl.WatchOutages(ctx, labels, func(ev wire.StreamEvent) error {
				if c.json {
					return enc.Encode(ev)
				}
				c.watchLine(ev)
				return nil
			}, func(o client.Outage) {
				// Said on stderr: stdout stays the events alone.
				ts := time.Now().Format("15:04:05.000")
				if o.Lost {
					fmt.Fprintf(c.stderr, "%s  lost the daemon (%s); reconnecting\n", ts, inert(o.Err.Error()))
				} else {
					fmt.Fprintf(c.stderr, "%s  reconnected; what was missed follows\n", ts)
				}
			})
		},
	}
}

// watchLine prints one event as text, aligned whether coloured or not.
func (c *cli) watchLine(ev wire.StreamEvent) {
	ts := ev.Time.Local().Format("15:04:05.000")
	if ev.Type == wire.EventReplaced {
		fmt.Fprintf(c.stdout, "%s  %s\n", ts, plural(int64(len(ev.Sandboxes)), "sandbox"))
		for _, sb := range ev.Sandboxes {
			fmt.Fprintf(c.stdout, "%s  %s %s%s\n", ts, c.paintPad(inert(sb.State), stateWidth), inert(sb.ID), portOf(sb))
		}
		return
	}
	sb := ev.Sandbox
	line := fmt.Sprintf("%s  %s %s%s", ts, c.paintPad(inert(strings.TrimPrefix(ev.Type, "sandbox.")), stateWidth), inert(sb.ID), portOf(*sb))
	if r := reason(*sb); r != "" {
		line += "  (" + r + ")"
	}
	fmt.Fprintln(c.stdout, line)
}

// portOf is "  port N" for a sandbox that holds a port, "" for one that
// holds none (stopped: its old number may be another's now).
func portOf(sb wire.SandboxInfo) string {
	if !wire.Live(sb.State) || sb.Port == 0 {
		return ""
	}
	return fmt.Sprintf("  port %d", sb.Port)
}
