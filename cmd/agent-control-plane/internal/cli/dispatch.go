// Package cli is agent-control-plane's command line: every command is
// one entry of a table (commands): its name, synopsis, flags, examples
// and Exec. The table is turned into a cobra command tree (the library
// docker, kubectl and gh are built on: POSIX flags, -ft bundled, shell
// completion, man pages), and the dispatcher does the rest the same way
// for all of them: global flags before or after the command,
// -h/--help, "help CMD", usage errors as one line and a hint, "did you
// mean" for commands and flags, and exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Version is the program's version (main sets it from its build).
var Version = "dev"

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the operation failed (API error, daemon refused)
	exitUsage    = 2 // bad command line
	exitNoDaemon = 3 // no daemon answered
)

const program = "agent-control-plane"

// command is one entry of the command table.
type command struct {
	name    string
	args    string // synopsis of the positional arguments, e.g. "NAME..."
	summary string
	// minArgs and maxArgs bound the positional arguments; maxArgs -1
	// allows any number.
	minArgs, maxArgs int
	// client: the command talks to the daemon and takes the global flags
	// --url, --token and --json (before or after its name).
	client bool
	// json: the command takes --json without being a client (it prints
	// what it knows locally).
	json bool
	// noJSON: a client command with nothing to print as JSON (a shell):
	// it takes --url and --token only.
	noJSON bool
	// flags binds the command's own flags; nil when it has none.
	flags func(fs *pflag.FlagSet)
	// hidden commands are for the daemon itself (the stub agent it
	// spawns): they run, but help, completion and "did you mean" leave
	// them out.
	hidden bool
	// names is how many of the first positionals are sandboxes' names
	// (completed from the daemon's list); -1: all of them.
	names int
	// commandAfterName ends the flags at the sandbox's name: the rest is
	// a command to run, its own flags included (exec NAME ls -la, as
	// docker exec reads it).
	commandAfterName bool
	// exec runs the command. A usageError exits 2, an exitError exits
	// with its code and prints nothing more; any other error is printed
	// as one line by the dispatcher.
	exec func(ctx context.Context, c *cli, args []string) error
}

func commands() []command {
	return []command{
		serveCommand(),
		ensureCommand(),
		runCommand(),
		lsCommand(),
		createCommand(),
		getCommand(),
		stopCommand(),
		startCommand(false),
		startCommand(true),
		rmCommand(),
		pruneCommand(),
		logsCommand(),
		execCommand(),
		cpCommand(),
		shellCommand(),
		watchCommand(),
		statsCommand(),
		keepaliveCommand(),
		autostopCommand(),
		resizeCommand(),
		snapshotsCommand(),
		infoCommand(),
		dashboardCommand(),
		openCommand(),
		installCommand(),
		uninstallCommand(),
		statusCommand(),
		stubCommand(),
		configCommand(),
		completionCommand(),
		manCommand(),
		versionCommand(),
	}
}

func versionCommand() command {
	return command{name: "version", summary: "print the version", json: true,
		exec: func(_ context.Context, c *cli, _ []string) error {
			if c.json {
				c.printJSON(map[string]string{"version": Version})
				return nil
			}
			fmt.Fprintln(c.stdout, Version)
			return nil
		}}
}

// unknownCommand says a name is no command, and which one was probably
// meant: the nearest by edit distance, if it is near (as git does).
func unknownCommand(root *cobra.Command, name string) string {
	var names []string
	for _, sub := range root.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if best := nearest(name, names); best != "" {
		return fmt.Sprintf("unknown command %q; did you mean %s?", name, best)
	}
	return fmt.Sprintf("unknown command %q", name)
}

// nearest is the one of names fewest edits from name, if at most two
// (as git's "did you mean"); "" when none is that near.
func nearest(name string, names []string) string {
	best, dist := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < dist {
			best, dist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// usageError is a bad command line: one line, then a hint, exit 2.
type usageError struct {
	cmd string // "" for the program itself
	msg string
}

func (e usageError) Error() string { return e.msg }

func usagef(cmd, format string, a ...any) error {
	return usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)}
}

// exitError ends a command with a code; what it had to say is printed.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// Run dispatches one command line and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	root := c.root()
	root.SetArgs(args)
	ctx, cancel := commandContext()
	defer cancel()
	return c.report(root.ExecuteContext(ctx))
}

// root builds the command tree from the table, every command bound to c.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   program,
		Short: "the local control plane for AI agent sandboxes",
		Long: program + " " + Version + ": the local control plane for AI agent sandboxes.\n\n" +
			"Run '" + program + " help COMMAND' or 'COMMAND -h' for a command's flags and examples.",
		Version: Version,
		// Flags given before the command are the root's (the global
		// ones); the command parses its own.
		TraverseChildren:   true,
		SilenceErrors:      true,
		SilenceUsage:       true,
		DisableSuggestions: true, // unknownCommand says it, as one line
		Args: func(root *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("", "%s", unknownCommand(root, args[0]))
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error { return usagef("", "no command given") },
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	c.bindGlobal(root.Flags())
	c.tree, c.commands = root, commands()
	for _, cmd := range c.commands {
		root.AddCommand(c.cobra(cmd))
	}
	root.SetHelpCommand(helpCommand())
	root.CompletionOptions.DisableDefaultCmd = true // completion is in the table
	c.completions(root)
	return root
}

// cobra turns one entry of the table into a cobra command.
func (c *cli) cobra(cmd command) *cobra.Command {
	cc := &cobra.Command{
		Use:     cmd.synopsis(),
		Short:   cmd.summary,
		Long:    upperFirst(cmd.summary),
		Example: examples[cmd.name],
		Hidden:  cmd.hidden,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cc *cobra.Command, args []string) error {
			if err := c.onlyItsGlobals(cmd, cc.Root().Flags()); err != nil {
				return err
			}
			if len(args) < cmd.minArgs || (cmd.maxArgs >= 0 && len(args) > cmd.maxArgs) {
				return usagef(cmd.name, "usage: %s %s", program, cmd.synopsis())
			}
			return cmd.exec(cc.Context(), c, args)
		},
	}
	fs := cc.Flags()
	fs.SortFlags = false
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	switch {
	case cmd.client && cmd.noJSON:
		c.bindRemote(fs)
	case cmd.client:
		c.bindGlobal(fs)
	case cmd.json:
		c.bindJSON(fs)
	}
	fs.SetInterspersed(!cmd.commandAfterName)
	return cc
}

// onlyItsGlobals refuses the global flags given before a command that
// does not take them (after it, they are unknown flags).
func (c *cli) onlyItsGlobals(cmd command, global *pflag.FlagSet) error {
	if cmd.client && !cmd.noJSON {
		return nil
	}
	if cmd.client && global.Changed("json") {
		return usagef(cmd.name, "%s takes no --json", cmd.name)
	}
	remote := global.Changed("url") || global.Changed("token")
	if !cmd.client && (remote || global.Changed("json") && !cmd.json) {
		takes := "--url, --token or --json"
		if cmd.json {
			takes = "--url or --token"
		}
		return usagef(cmd.name, "%s takes no %s", cmd.name, takes)
	}
	return nil
}

// flagError turns pflag's errors into usage errors of the command, with
// the flag probably meant when one is near.
func flagError(cc *cobra.Command, err error) error {
	name := cc.Name()
	if !cc.HasParent() {
		name = ""
	}
	msg := err.Error()
	if bad, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		var names []string
		cc.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if best := nearest(bad, names); best != "" {
			msg += "; did you mean --" + best + "?"
		}
	}
	return usageError{cmd: name, msg: msg}
}

// helpCommand is "help [COMMAND]": a command's help, or the program's;
// an unknown command is a usage error, as anywhere else.
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "print the help of a command, or of the program",
		ValidArgsFunction: func(cc *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			for _, sub := range cc.Root().Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cc *cobra.Command, args []string) error {
			root := cc.Root()
			if len(args) == 0 {
				return root.Help()
			}
			target, rest, err := root.Find(args)
			if err != nil || target == root || len(rest) > 0 {
				return usagef("", "%s", unknownCommand(root, args[0]))
			}
			return target.Help()
		},
	}
}

func (cmd command) synopsis() string {
	s := cmd.name
	hasFlags := cmd.client || cmd.json || cmd.flags != nil
	if hasFlags {
		s += " [flags]"
	}
	if cmd.args != "" {
		s += " " + cmd.args
	}
	return s
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// report turns err into output and an exit code.
func (c *cli) report(err error) int {
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return int(ee)
	case errors.As(err, &ue) && c.json:
		c.printError("usage", ue.msg)
		return exitUsage
	case errors.As(err, &ue):
		prefix := program
		hint := "Run '" + program + " help' for the commands."
		if ue.cmd != "" {
			prefix += " " + ue.cmd
			hint = "Run '" + program + " " + ue.cmd + " -h' for usage."
		}
		fmt.Fprintf(c.stderr, "%s: %s\n%s\n", prefix, inert(ue.msg), hint)
		return exitUsage
	}
	return c.fail(err)
}
