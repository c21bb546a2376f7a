package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/daemon"
	"github.com/agent-control-plane/agent-control-plane/conf"
)

// configFlags declares the flags that choose the daemon's configuration
// (serve's and config's) on fs, and returns what reads them once parsed.
func configFlags(fs *pflag.FlagSet) func() conf.Sources {
	// Only the flags set are passed on (conf applies the precedence);
	// the defaults here are for the help text.
	var configPath string
	def := conf.Default(os.Getenv)
	fs.StringVar(&configPath, "config", "", "TOML config `file` (default: $AGENT_CONTROL_PLANE_CONFIG, else "+displayPath(conf.DefaultFile(os.Getenv))+" when it exists)")
	for _, f := range conf.Flags(def) {
		fs.String(f.Name, f.Default, f.Usage)
	}
	return func() conf.Sources {
		flags := map[string]string{}
		fs.Visit(func(f *pflag.Flag) {
			if f.Name != "config" {
				flags[f.Name] = f.Value.String()
			}
		})
		return conf.Sources{File: configPath, Flags: flags}
	}
}

// displayPath writes a path under $HOME with "~".
func displayPath(p string) string {
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		if rest, ok := strings.CutPrefix(p, home+"/"); ok {
			return "~/" + rest
		}
	}
	return p
}

func serveCommand() command {
	var sources func() conf.Sources
	return command{
		name: "serve", summary: "run the daemon in the foreground (precedence: flag > environment > config file > default)",
		flags: func(fs *pflag.FlagSet) { sources = configFlags(fs) },
		exec: func(_ context.Context, c *cli, _ []string) error {
			src := sources()
			cfg, err := conf.Load(src)
			if err != nil {
				// A bad setting, wherever it came from: one line, exit 2.
				fmt.Fprintln(c.stderr, "agent-control-plane:", err)
				return exitError(exitUsage)
			}
			return daemon.Serve(cfg, src, c.stderr, Version)
		},
	}
}
