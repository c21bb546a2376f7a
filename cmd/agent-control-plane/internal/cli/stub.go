package cli

import (
	"context"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/stub"
)

func stubCommand() command {
	return command{
		name: "stub-agent", summary: "run the bundled stub agent-server (the default child)", hidden: true,
		exec: func(_ context.Context, c *cli, _ []string) error {
			if code := stub.Run(c.stdout, c.stderr); code != exitOK {
				return exitError(code)
			}
			return nil
		},
	}
}
