// Command agent-control-plane is the local control plane for AI agent
// sandboxes: the daemon (serve), its bundled stub agent-server
// (stub-agent), and a CLI for the daemon's /v1 API.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes.
const (
	exitOK       = 0
	exitFailure  = 1 // the operation failed (API error, daemon refused)
	exitUsage    = 2 // bad command line
	exitNoDaemon = 3 // no daemon answered
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the daemon in the foreground", runServe},
		{"ensure", "make sure a daemon is running (start one if none is)", runEnsure},
		{"run", "create a sandbox, keep it alive while attached", runRun},
		{"ls", "list sandboxes", runLs},
		{"create", "create a sandbox", runCreate},
		{"get", "show one sandbox", runGet},
		{"stop", "stop a sandbox (terminal)", runStop},
		{"rm", "delete sandboxes", runRm},
		{"logs", "print a sandbox's entrypoint logs (redacted)", runLogs},
		{"watch", "follow sandbox events live", runWatch},
		{"keepalive", "refresh a sandbox's activity", runKeepalive},
		{"autostop", "set a sandbox's idle auto-stop interval", runAutostop},
		{"info", "show the daemon's identity", runInfo},
		{"dashboard", "print (or --open) the link that signs a browser in", runDashboard},
		{"install", "install as a systemd user service (--now starts it)", runInstall},
		{"uninstall", "remove the systemd user service (sandboxes stay)", runUninstall},
		{"status", "show the service's state and the daemon's", runStatus},
		{"stub-agent", "run the bundled stub agent-server (the default child)", runStub},
		{"version", "print the version", func([]string, io.Writer, io.Writer) int { fmt.Println(version); return exitOK }},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "agent-control-plane %s: the local control plane for AI agent sandboxes\n\nUsage: agent-control-plane <command> [flags]\n\nCommands:\n", version)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'agent-control-plane <command> -h' for a command's flags.\n")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "agent-control-plane: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}
