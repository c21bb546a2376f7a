package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/service"
)

func uninstallCommand() command {
	var prefix string
	var dry bool
	return command{
		name: "uninstall", summary: "remove the systemd user service (sandboxes stay)",
		flags: func(fs *pflag.FlagSet) {
			fs.Bool("user", true, "the systemd user service (the only kind)")
			fs.StringVar(&prefix, "prefix", service.DefaultPrefix(), "the binary was installed into `DIR`/bin")
			fs.BoolVar(&dry, "dry-run", false, "print what would be done, change nothing")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error { return c.uninstall(ctx, prefix, dry) },
	}
}

// uninstall stops and removes the user units and the installed binary.
// Sandboxes and the root are left alone.
func (c *cli) uninstall(ctx context.Context, prefix string, dry bool) error {
	p, err := service.PathsFor(prefix)
	if err != nil {
		return err
	}
	var units []string
	for _, f := range []string{p.Service, p.Socket} {
		if _, err := os.Stat(f); err == nil {
			if err := service.OwnUnit(f); err != nil {
				return err
			}
			units = append(units, f)
		}
	}
	// The binary goes only if the unit install wrote names it, with the
	// hash it has now: anything else at that path (another build, a file
	// of the user's) is left alone.
	binary, why := service.InstalledBinary(p.Service)
	if _, err := os.Stat(p.Binary); err == nil && p.Binary != binary && why == "" {
		why = p.Binary + " is not the binary the service names as installed"
	}
	if dry {
		fmt.Fprintf(c.stdout, "Would stop and disable %s and %s.\n", service.ServiceUnit, service.SocketUnit)
		for _, f := range units {
			fmt.Fprintf(c.stdout, "Would remove %s.\n", f)
		}
		if binary != "" {
			fmt.Fprintf(c.stdout, "Would remove %s.\n", binary)
		}
		if why != "" {
			fmt.Fprintf(c.stdout, "Would leave the binary alone: %s.\n", why)
		}
		fmt.Fprintln(c.stdout, "Sandboxes and their root would be left alone.")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, merr := service.NewManager(ctx)
	if merr == nil {
		defer m.Close()
		for _, u := range []string{service.ServiceUnit, service.SocketUnit} {
			if err := m.Stop(ctx, u); err != nil {
				fmt.Fprintf(c.stderr, "agent-control-plane: stop %s: %v\n", u, err)
			}
		}
		if len(units) > 0 {
			if err := m.Disable(ctx, []string{service.ServiceUnit, service.SocketUnit}); err != nil {
				fmt.Fprintf(c.stderr, "agent-control-plane: disable the units: %v\n", err)
			}
		}
	} else {
		fmt.Fprintf(c.stderr, "agent-control-plane: %v; removing the files only.\n", merr)
	}
	for _, f := range units {
		if err := os.Remove(f); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Removed %s\n", f)
	}
	if merr == nil {
		if err := m.Reload(ctx); err != nil {
			fmt.Fprintf(c.stderr, "agent-control-plane: reload the user manager: %v\n", err)
		}
	}
	if binary != "" {
		if err := os.Remove(binary); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Removed %s\n", binary)
	}
	if why != "" {
		fmt.Fprintf(c.stdout, "Left the binary alone: %s.\n", why)
	}
	fmt.Fprintln(c.stdout, "Sandboxes and their root are left alone: children still running keep running; delete them first with agent-control-plane rm, or remove the root yourself.")
	return nil
}

func statusCommand() command {
	var prefix string
	return command{
		name: "status", summary: "show the service's state and the daemon's", client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&prefix, "prefix", service.DefaultPrefix(), "where install put the binary")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error { return c.status(ctx, prefix) },
	}
}

// status shows the service's state and the daemon's.
func (c *cli) status(ctx context.Context, prefix string) error {
	p, err := service.PathsFor(prefix)
	if err != nil {
		return err
	}
	type serviceState struct {
		Installed bool   `json:"installed"`
		UnitFile  string `json:"unitFile,omitempty"`
		State     string `json:"state,omitempty"` // e.g. "active (running)"
		Unknown   string `json:"stateUnknown,omitempty"`
	}
	var st struct {
		Service serviceState `json:"service"`
		URL     string       `json:"url"`
		Daemon  *wire.Info   `json:"daemon"` // null: not answering
		Error   string       `json:"error,omitempty"`
	}
	unit := "not installed"
	if _, err := os.Stat(p.Service); err == nil {
		st.Service = serviceState{Installed: true, UnitFile: p.Service}
		unit = "installed (" + p.Service + ")"
		mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
		if m, err := service.NewManager(mctx); err != nil {
			st.Service.Unknown = err.Error()
			unit += "; state unknown: " + err.Error()
		} else {
			if s, err := m.State(mctx, service.ServiceUnit); err == nil {
				st.Service.State = s
				unit += "; " + s
			}
			m.Close()
		}
		mcancel()
	}
	cl := c.client()
	st.URL = cl.URL()
	info, err := cl.Info(ctx)
	if err == nil {
		st.Daemon = &info
	} else {
		st.Error = err.Error()
	}
	if c.json {
		c.printJSON(st)
	} else {
		fmt.Fprintf(c.stdout, "Service:  %s\n", unit)
		if err != nil {
			fmt.Fprintf(c.stdout, "Daemon:   not answering at %s (%s)\n", cl.URL(), inert(err.Error()))
		} else {
			fmt.Fprintf(c.stdout, "Daemon:   %s, pid %d, version %s, up %s\nRoot:     %s\n", cl.URL(), info.PID, inert(info.Version), ago(time.Since(info.StartedAt.Time)), inert(info.Root))
		}
	}
	if err != nil {
		return exitError(exitNoDaemon)
	}
	return nil
}
