// Package cli is agent-control-plane's command line: every command is
// one entry of a table (commands): its name, synopsis, flags and Exec.
// The dispatcher does the rest the same way for all of them: global
// flags before the command, -h/--help, "help CMD", usage errors as one
// line and a hint, and exit codes.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
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
	// flags binds the command's own flags; nil when it has none.
	flags func(fs *flag.FlagSet)
	// hidden commands are for the daemon itself (the stub agent it
	// spawns): they run, but help, completion and "did you mean" leave
	// them out.
	hidden bool
	// commandAfter, when set, ends the flags at the first argument
	// after this many positionals: the rest is a command to run, its
	// own flags included (exec NAME ls -la, as docker exec reads it).
	commandAfter int
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
		{name: "version", summary: "print the version", json: true, exec: func(_ context.Context, c *cli, _ []string) error {
			if c.json {
				c.printJSON(map[string]string{"version": Version})
				return nil
			}
			fmt.Fprintln(c.stdout, Version)
			return nil
		}},
	}
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

// unknownCommand says a name is no command, and which one was probably
// meant: the nearest by edit distance, if it is near (as git does).
func unknownCommand(name string) string {
	best, dist := "", 3 // at most two edits away
	for _, cmd := range commands() {
		if d := editDistance(name, cmd.name); d < dist && !cmd.hidden {
			best, dist = cmd.name, d
		}
	}
	if best == "" {
		return fmt.Sprintf("unknown command %q", name)
	}
	return fmt.Sprintf("unknown command %q; did you mean %s?", name, best)
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

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "agent-control-plane %s: the local control plane for AI agent sandboxes\n\n", Version)
	fmt.Fprintf(w, "Usage: agent-control-plane [--url URL] [--token TOKEN] [--json] <command> [flags] [args]\n\nCommands:\n")
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'agent-control-plane help <command>' or '<command> -h' for a command's flags.\n")
}

// Run dispatches one command line and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	c := newCLI(stdout, stderr)
	global := flag.NewFlagSet("agent-control-plane", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	c.bindGlobal(global)
	showVersion := global.Bool("version", false, "print the version")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			mainUsage(stdout)
			return exitOK
		}
		return c.report(usagef("", "%v", err))
	}
	args = global.Args()
	switch {
	case *showVersion:
		fmt.Fprintln(stdout, Version)
		return exitOK
	case len(args) == 0:
		return c.report(usagef("", "no command given"))
	case args[0] == "help":
		if len(args) == 1 {
			mainUsage(stdout)
			return exitOK
		}
		cmd, ok := lookup(args[1])
		if !ok {
			return c.report(usagef("", "%s", unknownCommand(args[1])))
		}
		cmd.usage(stdout, cmd.flagSet(c))
		return exitOK
	}
	cmd, ok := lookup(args[0])
	if !ok {
		return c.report(usagef("", "%s", unknownCommand(args[0])))
	}
	if remote, asJSON := clientFlags(global); !cmd.client && (remote || asJSON && !cmd.json) {
		takes := "--url, --token or --json"
		if cmd.json {
			takes = "--url or --token"
		}
		return c.report(usagef(cmd.name, "%s takes no %s", cmd.name, takes))
	}
	fs := cmd.flagSet(c)
	pos, err := parseInterleaved(fs, args[1:], cmd.commandAfter)
	if errors.Is(err, flag.ErrHelp) {
		cmd.usage(stdout, fs)
		return exitOK
	}
	if err != nil {
		return c.report(usagef(cmd.name, "%v", err))
	}
	if len(pos) < cmd.minArgs || (cmd.maxArgs >= 0 && len(pos) > cmd.maxArgs) {
		return c.report(usagef(cmd.name, "usage: agent-control-plane %s", cmd.synopsis()))
	}
	ctx, cancel := commandContext()
	defer cancel()
	return c.report(cmd.exec(ctx, c, pos))
}

// clientFlags reports whether --url or --token, and whether --json, was
// given on fs.
func clientFlags(fs *flag.FlagSet) (remote, asJSON bool) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "url", "token":
			remote = true
		case "json":
			asJSON = true
		}
	})
	return remote, asJSON
}

// flagSet returns the command's flags, bound (client flags to c).
func (cmd command) flagSet(c *cli) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch {
	case cmd.client:
		c.bindGlobal(fs)
	case cmd.json:
		c.bindJSON(fs)
	}
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	return fs
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

// usage prints the command's help: synopsis, summary, flags.
func (cmd command) usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: agent-control-plane %s\n\n%s\n", cmd.synopsis(), upperFirst(cmd.summary))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, fs)
	}
}

// printFlags lists the flags as people type them, with two dashes (one
// for a single letter; Go's PrintDefaults shows one for all), each with
// its argument, help and default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, help := flag.UnquoteUsage(f)
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		line := "  " + dashes + f.Name
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(help, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" && d != "[]" && d != "map[]" {
			fmt.Fprintf(w, " (default %s)", d)
		}
		fmt.Fprintln(w)
	})
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// parseInterleaved parses flags that may stand before, between or after
// positional arguments and returns the positionals. Everything after "--"
// is positional, and, with commandAfter > 0, everything after that many
// positionals (flag.Parse stops at the first, or after a "--").
func parseInterleaved(fs *flag.FlagSet, args []string, commandAfter int) ([]string, error) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 && commandAfter == 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
		if commandAfter > 0 && len(pos) == commandAfter {
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			return append(pos, args...), nil
		}
	}
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
		prefix := "agent-control-plane"
		hint := "Run 'agent-control-plane help' for the commands."
		if ue.cmd != "" {
			prefix += " " + ue.cmd
			hint = "Run 'agent-control-plane " + ue.cmd + " -h' for usage."
		}
		fmt.Fprintf(c.stderr, "%s: %s\n%s\n", prefix, inert(ue.msg), hint)
		return exitUsage
	}
	return c.fail(err)
}
