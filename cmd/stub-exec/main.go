// Command stub-exec is a test tool, never part of the product: it runs
// the few commands the runtime conformance suite execs inside a sandbox
// (fake.Tool: exit, env, pwd, cat, err, sleep), so that a native sandbox
// and a docker one built FROM scratch (no shell) are judged by the same
// commands as the fake runtime. Tests build it (testenv.ToolArgv; the
// docker tests copy it into their stub image).
package main

import (
	"os"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
)

func main() { os.Exit(fake.RunTool(os.Args[1:])) }
