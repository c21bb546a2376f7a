package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// completionCommand prints a shell completion script generated from the
// command table: commands, each one's flags, and sandbox names (from
// `ls -q`) where a command takes NAME.
func completionCommand() command {
	return command{
		name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script (e.g. source <(agent-control-plane completion bash))",
		minArgs: 1, maxArgs: 1,
		exec: func(_ context.Context, c *cli, args []string) error {
			specs := completionSpecs(c)
			switch args[0] {
			case "bash":
				writeBash(c.stdout, specs)
			case "zsh":
				fmt.Fprintln(c.stdout, "#compdef agent-control-plane")
				fmt.Fprintln(c.stdout, "autoload -U +X bashcompinit && bashcompinit")
				writeBash(c.stdout, specs)
			case "fish":
				writeFish(c.stdout, specs)
			default:
				return usagef("completion", "want bash, zsh or fish, got %q", args[0])
			}
			return nil
		},
	}
}

// completionSpec is what a shell needs to know of one command.
type completionSpec struct {
	name, summary string
	flags         []string // without dashes
	names         bool     // takes sandbox names
}

func completionSpecs(c *cli) []completionSpec {
	var out []completionSpec
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		s := completionSpec{name: cmd.name, summary: cmd.summary, names: strings.HasPrefix(cmd.args, "NAME")}
		cmd.flagSet(c).VisitAll(func(f *flag.Flag) { s.flags = append(s.flags, f.Name) })
		sort.Strings(s.flags)
		out = append(out, s)
	}
	return out
}

func writeBash(w io.Writer, specs []completionSpec) {
	var names []string
	for _, s := range specs {
		names = append(names, s.name)
	}
	fmt.Fprintln(w, "# agent-control-plane completion for bash, generated from its command table.")
	fmt.Fprintln(w, "_agent_control_plane() {")
	fmt.Fprintln(w, `	local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" i`)
	fmt.Fprintln(w, `	for ((i = 1; i < COMP_CWORD; i++)); do`)
	fmt.Fprintln(w, `		case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac`)
	fmt.Fprintln(w, `	done`)
	fmt.Fprintln(w, `	case "$cmd" in`)
	fmt.Fprintf(w, "\t\"\") COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(names, " "))
	for _, s := range specs {
		var flags []string
		for _, f := range s.flags {
			flags = append(flags, dashes(f)+f)
		}
		words := fmt.Sprintf("%q", strings.Join(flags, " "))
		if s.names {
			fmt.Fprintf(w, "\t%s) if [[ \"$cur\" == -* ]]; then COMPREPLY=($(compgen -W %s -- \"$cur\")); else COMPREPLY=($(compgen -W \"$(agent-control-plane ls -q 2>/dev/null)\" -- \"$cur\")); fi ;;\n", s.name, words)
		} else {
			fmt.Fprintf(w, "\t%s) COMPREPLY=($(compgen -W %s -- \"$cur\")) ;;\n", s.name, words)
		}
	}
	fmt.Fprintln(w, "\tesac")
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -F _agent_control_plane agent-control-plane")
}

func writeFish(w io.Writer, specs []completionSpec) {
	fmt.Fprintln(w, "# agent-control-plane completion for fish, generated from its command table.")
	fmt.Fprintln(w, "complete -c agent-control-plane -f")
	for _, s := range specs {
		fmt.Fprintf(w, "complete -c agent-control-plane -n __fish_use_subcommand -a %s -d %s\n", fishQuote(s.name), fishQuote(s.summary))
		for _, f := range s.flags {
			opt := "-l"
			if len(f) == 1 {
				opt = "-s"
			}
			fmt.Fprintf(w, "complete -c agent-control-plane -n '__fish_seen_subcommand_from %s' %s %s\n", s.name, opt, f)
		}
		if s.names {
			fmt.Fprintf(w, "complete -c agent-control-plane -n '__fish_seen_subcommand_from %s' -a '(agent-control-plane ls -q 2>/dev/null)'\n", s.name)
		}
	}
}

// dashes is how a flag is written: -q, --label.
func dashes(name string) string {
	if len(name) == 1 {
		return "-"
	}
	return "--"
}

// fishQuote single-quotes s for fish.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
