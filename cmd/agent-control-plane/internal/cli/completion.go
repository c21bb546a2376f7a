package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// completionCommand prints a shell completion script: cobra's, which
// asks the program itself (its hidden __complete command) at every Tab,
// so commands, flags and values come from the table and the daemon's
// live data (sandbox names, snapshots, runtimes).
func completionCommand() command {
	return command{
		name: "completion", args: "bash|zsh|fish|powershell", minArgs: 1, maxArgs: 1,
		summary: "print a shell completion script; values (sandbox names, snapshots, states) come from the daemon as you type",
		exec: func(_ context.Context, c *cli, args []string) error {
			root := c.tree
			switch args[0] {
			case "bash":
				io.WriteString(c.stdout, bashWithoutBashCompletion)
				return root.GenBashCompletionV2(c.stdout, true)
			case "zsh":
				return root.GenZshCompletion(c.stdout)
			case "fish":
				return root.GenFishCompletion(c.stdout, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(c.stdout)
			}
			return usagef("completion", "want bash, zsh, fish or powershell, got %q", args[0])
		},
	}
}

// bashWithoutBashCompletion gives cobra's bash script the one function
// it takes from the bash-completion package when that is not loaded
// (a bare bash, a container, macOS): the words as bash split them.
const bashWithoutBashCompletion = `# agent-control-plane completion for bash.
if ! declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
_get_comp_words_by_ref() {
    while [[ $1 == -* ]]; do
        if [[ $1 == -n ]]; then shift; fi
        shift
    done
    local v
    for v; do
        case $v in
        cur) cur=${COMP_WORDS[COMP_CWORD]} ;;
        prev) prev=${COMP_WORDS[COMP_CWORD-1]} ;;
        words) words=("${COMP_WORDS[@]}") ;;
        cword) cword=$COMP_CWORD ;;
        esac
    done
}
fi
`

// completions gives every command its live values: sandbox names for
// the positionals that are names, and the values of the flags that
// name something the daemon knows.
func (c *cli) completions(root *cobra.Command) {
	values := map[string]func(context.Context) ([]cobra.Completion, error){
		"snapshot": c.snapshotNames,
		"runtime":  c.runtimeNames,
		"state": func(context.Context) ([]cobra.Completion, error) {
			return []cobra.Completion{wire.StateStarting, wire.StateStarted, wire.StateStopped}, nil
		},
	}
	for _, cmd := range c.commands {
		cc, _, err := root.Find([]string{cmd.name})
		if err != nil {
			continue
		}
		for flag, list := range values {
			if cc.Flags().Lookup(flag) != nil {
				cc.RegisterFlagCompletionFunc(flag, c.complete(list))
			}
		}
		switch {
		case cmd.names != 0:
			names, sandboxes := cmd.names, c.complete(c.sandboxNames)
			cc.ValidArgsFunction = func(cc *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if names > 0 && len(args) >= names {
					return nil, cobra.ShellCompDirectiveDefault
				}
				return sandboxes(cc, args, prefix)
			}
		case cmd.maxArgs == 0:
			cc.ValidArgsFunction = cobra.NoFileCompletions
		}
	}
}

// complete asks the daemon for values, briefly; no daemon, no values.
func (c *cli) complete(list func(context.Context) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(cc *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cc.Context(), 2*time.Second)
		defer cancel()
		all, err := list(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, v := range all {
			if strings.HasPrefix(v, prefix) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func (c *cli) sandboxNames(ctx context.Context) ([]cobra.Completion, error) {
	list, err := c.client().List(ctx, nil)
	var out []cobra.Completion
	for _, s := range list {
		out = append(out, cobra.CompletionWithDesc(s.Name, s.State))
	}
	return out, err
}

func (c *cli) snapshotNames(ctx context.Context) ([]cobra.Completion, error) {
	list, err := c.client().Snapshots(ctx)
	var out []cobra.Completion
	for _, s := range list {
		note := s.Runtime
		if s.Default {
			note += ", the default"
		}
		out = append(out, cobra.CompletionWithDesc(s.Name, note))
	}
	return out, err
}

func (c *cli) runtimeNames(ctx context.Context) ([]cobra.Completion, error) {
	info, err := c.client().Info(ctx)
	return info.Runtimes, err
}

// manCommand writes a man page per command (section 1) into a
// directory, from the same tree as the help.
func manCommand() command {
	return command{
		name: "man", args: "DIR", minArgs: 1, maxArgs: 1,
		summary: "write the man pages (one per command, section 1) into DIR",
		exec: func(_ context.Context, c *cli, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			c.tree.DisableAutoGenTag = true
			pages := append([]*cobra.Command{c.tree}, c.tree.Commands()...)
			n := 0
			for _, cc := range pages {
				if !cc.IsAvailableCommand() && cc != c.tree {
					continue
				}
				if err := writeManPage(cc, filepath.Join(args[0], strings.ReplaceAll(cc.CommandPath(), " ", "-")+".1")); err != nil {
					return err
				}
				n++
			}
			fmt.Fprintf(c.stdout, "Wrote %s in %s\n", plural(int64(n), "man page"), args[0])
			return nil
		},
	}
}

// writeManPage writes cobra's man page of cc, with what mandoc's and
// groff's checks object to in it mended: the date as ISO 8601, and each
// flag's text indented by a request (cobra indents it by a tab).
func writeManPage(cc *cobra.Command, path string) error {
	var b bytes.Buffer
	now := time.Now()
	header := &doc.GenManHeader{Title: strings.ToUpper(program), Section: "1", Date: &now, Source: program + " " + Version, Manual: program}
	if err := doc.GenMan(cc, header, &b); err != nil {
		return err
	}
	page := strings.Replace(b.String(), `"`+now.Format("Jan 2006")+`"`, `"`+now.Format(time.DateOnly)+`"`, 1)
	page = regexp.MustCompile(`(?m)^\t(.*)$`).ReplaceAllString(page, ".RS 4\n$1\n.RE")
	return os.WriteFile(path, []byte(page), 0o644)
}
