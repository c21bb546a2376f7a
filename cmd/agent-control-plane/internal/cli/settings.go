package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// The commands that change a running sandbox's settings: keepalive,
// autostop, resize.

func keepaliveCommand() command {
	var every time.Duration
	return command{
		name: "keepalive", args: "NAME", summary: "refresh a sandbox's activity", minArgs: 1, maxArgs: 1, client: true, names: 1,
		flags: func(fs *pflag.FlagSet) {
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
		minArgs: 2, maxArgs: 2, client: true, names: 1,
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
		name: "resize", args: "NAME", summary: "change a running sandbox's cpu, memory or pids limit", minArgs: 1, maxArgs: 1, client: true, names: 1,
		flags: func(fs *pflag.FlagSet) { limitFlags(fs, &limits) },
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
