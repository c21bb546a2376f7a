package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/conf"
)

// configCommand prints the configuration serve would run with, as TOML,
// each value with where it came from. Secrets (the token, snapshots' env
// values) are hidden.
func configCommand() command {
	var sources func() conf.Sources
	return command{
		name: "config", summary: "print the configuration serve would use, with where each value comes from", json: true,
		flags: func(fs *pflag.FlagSet) { sources = configFlags(fs) },
		exec: func(_ context.Context, c *cli, _ []string) error {
			cfg, err := conf.Load(sources())
			if err != nil {
				return usagef("config", "%v", err) // as serve would refuse it: exit 2
			}
			settings := cfg.Settings()
			if c.json {
				type setting struct {
					Key    string `json:"key"`
					Value  string `json:"value"` // TOML
					Origin string `json:"origin"`
				}
				out := struct {
					File     string    `json:"file,omitempty"`
					Settings []setting `json:"settings"`
				}{File: cfg.File}
				for _, s := range settings {
					out.Settings = append(out.Settings, setting{s.Key, s.Value, s.Origin})
				}
				c.printJSON(out)
				return nil
			}
			if cfg.File != "" {
				fmt.Fprintf(c.stdout, "# config file: %s\n", cfg.File)
			} else {
				fmt.Fprintf(c.stdout, "# config file: none (looked for %s)\n", displayPath(conf.DefaultFile(os.Getenv)))
			}
			fmt.Fprintln(c.stdout, "# each value's origin: default, file, env VARIABLE or flag --NAME")
			section := ""
			for _, s := range settings {
				sec, key := "", s.Key
				// The last part is never quoted (a quoted snapshot
				// name may hold dots, but comes before it).
				if i := strings.LastIndexByte(s.Key, '.'); i >= 0 {
					sec, key = s.Key[:i], s.Key[i+1:]
				}
				if sec != section {
					fmt.Fprintf(c.stdout, "\n[%s]\n", sec)
					section = sec
				}
				line := key + " = " + s.Value
				if s.EnvOnly {
					line = "# " + line // no file key: kept valid TOML
				}
				fmt.Fprintf(c.stdout, "%-48s # %s\n", line, s.Origin)
			}
			return nil
		},
	}
}
