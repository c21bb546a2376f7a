// Command agent-control-plane is the local control plane for AI agent
// sandboxes: the daemon (serve), its bundled stub agent-server
// (stub-agent), and a CLI for the daemon's /v1 API. Each lives in its own
// package under internal/: cli (the command table and every command),
// daemon (the start-up the serve command hands its configuration to),
// stub (the stub agent).
package main

import (
	"os"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	cli.Version = version
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
