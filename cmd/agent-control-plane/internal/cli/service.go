package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/service"
	"github.com/agent-control-plane/agent-control-plane/conf"
)

func installCommand() command {
	var o installOptions
	return command{
		name: "install", summary: "install as a systemd user service (--now starts it)",
		flags: func(fs *pflag.FlagSet) {
			fs.Bool("user", true, "install as a systemd user service (the only kind)")
			fs.BoolVar(&o.now, "now", false, "start (or restart) the service once installed")
			fs.StringVar(&o.prefix, "prefix", service.DefaultPrefix(), "install the binary into `DIR`/bin")
			fs.StringVar(&o.config, "config", "", "config `file` the service runs with (default: serve's own, ~/.config/agent-control-plane/config.toml when it exists)")
			fs.BoolVar(&o.dry, "dry-run", false, "print what would be done, change nothing")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error { return c.install(ctx, o) },
	}
}

type installOptions struct {
	now, dry       bool
	prefix, config string
}

// install copies this binary to DIR/bin and installs the user units.
//
// It is long because an install is one ordered sequence (binary, units,
// manager, start, check), each step reported as it is done.
func (c *cli) install(ctx context.Context, o installOptions) error {
	p, err := service.PathsFor(o.prefix)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if o.config != "" {
		if o.config, err = filepath.Abs(o.config); err != nil {
			return err
		}
	}
	cfg, err := conf.Load(conf.Sources{File: o.config})
	if err != nil {
		return err
	}
	binary, err := filepath.Abs(p.Binary)
	if err != nil {
		return err
	}
	for _, f := range []string{p.Service, p.Socket} {
		if err := service.OwnUnit(f); err != nil {
			return err
		}
	}
	sum, err := service.FileSum(self)
	if err != nil {
		return fmt.Errorf("read this binary: %w", err)
	}
	carry, left := conf.ServiceEnv(os.Getenv)
	unit, socket := service.Render(service.Params{Binary: binary, BinarySum: sum, Config: o.config, Listen: cfg.Listen, Path: os.Getenv("PATH"), Env: carry})
	for _, kv := range carry {
		fmt.Fprintf(c.stdout, "Carrying %s from the environment into the service.\n", kv)
	}
	for _, name := range left {
		fmt.Fprintf(c.stderr, "agent-control-plane: not carrying %s into the service: a unit file is readable by every user; the service reads the token file instead (or put the variable in a drop-in of mode 0600)\n", name)
	}
	if o.dry {
		fmt.Fprintf(c.stdout, "Would copy %s to %s (mode 0755).\n", self, binary)
		fmt.Fprintf(c.stdout, "Would write %s:\n%s\nWould write %s:\n%s\n", p.Socket, socket, p.Service, unit)
		fmt.Fprintf(c.stdout, "Would reload the user manager and enable %s and %s", service.SocketUnit, service.ServiceUnit)
		if o.now {
			fmt.Fprint(c.stdout, ", then start them")
		}
		fmt.Fprintln(c.stdout, ".")
		return nil
	}
	if self != binary {
		if err := service.CopyExecutable(self, binary); err != nil {
			return fmt.Errorf("install the binary: %w", err)
		}
		// The isolated sandboxes' init, when it was built beside this
		// binary: the daemon finds it beside its own.
		init := filepath.Join(filepath.Dir(self), "agent-control-plane-init")
		if _, err := os.Stat(init); err == nil {
			if err := service.CopyExecutable(init, filepath.Join(filepath.Dir(binary), filepath.Base(init))); err != nil {
				return fmt.Errorf("install the init: %w", err)
			}
		}
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{p.Socket, socket}, {p.Service, unit}} {
		if err := service.WriteFileAtomic(f.path, f.data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	fmt.Fprintf(c.stdout, "Installed %s\nWrote %s\nWrote %s\n", binary, p.Socket, p.Service)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, err := service.NewManager(ctx)
	if err != nil {
		fmt.Fprintf(c.stderr, "agent-control-plane: %v.\nThe units are written; once a user manager runs, enable them with:\n  systemctl --user daemon-reload && systemctl --user enable --now %s %s\n", err, service.SocketUnit, service.ServiceUnit)
		return exitError(exitFailure)
	}
	defer m.Close()
	if err := m.Reload(ctx); err != nil {
		return fmt.Errorf("reload the user manager: %w", err)
	}
	if err := m.Enable(ctx, []string{p.Socket, p.Service}); err != nil {
		return fmt.Errorf("enable the units: %w", err)
	}
	fmt.Fprintf(c.stdout, "Enabled %s and %s: the daemon starts with your session.\n", service.SocketUnit, service.ServiceUnit)
	if o.now {
		// The socket first, so that the service finds its listener; a
		// restart picks up the binary just installed. Sandboxes survive it.
		for _, u := range []string{service.SocketUnit, service.ServiceUnit} {
			if err := m.Restart(ctx, u); err != nil {
				return fmt.Errorf("start %s: %w", u, err)
			}
		}
		fmt.Fprintln(c.stdout, "Started. Logs: journalctl --user -u agent-control-plane")
	}
	if tip := service.LingerTip(); tip != "" {
		fmt.Fprintln(c.stdout, tip)
	}
	if !service.OnPath(filepath.Dir(binary)) {
		fmt.Fprintf(c.stdout, "%s is not on your PATH: add it (export PATH=\"%s:$PATH\" in your shell's profile), then run: agent-control-plane status\n", filepath.Dir(binary), filepath.Dir(binary))
	} else {
		fmt.Fprintln(c.stdout, "Next: agent-control-plane status")
	}
	return nil
}
