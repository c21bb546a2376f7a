package daemon

import (
	"fmt"
	"log/slog"
	"os/exec"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
)

// isolation is how native sandboxes are isolated on this machine, as
// cfg's isolation asks: "auto" isolates them where the kernel lets this
// user make namespaces (else one log line says why not), "namespaces"
// stops the daemon where it does not, "off" never isolates unless a
// snapshot asks. It also says why the machine refuses, for such a
// snapshot.
func isolation(cfg conf.Config, log *slog.Logger) (iso native.Isolation, refused error, err error) {
	refused = native.Probe()
	switch {
	case cfg.Isolation == "off":
		iso.Default = runtime.IsolationOff
	case refused == nil:
		iso.Default = runtime.IsolationNamespaces
	case cfg.Isolation == "namespaces":
		return iso, refused, fmt.Errorf("isolation = \"namespaces\", but this machine cannot isolate sandboxes: %w", refused)
	default:
		iso.Default = runtime.IsolationOff
		log.Warn("native sandboxes run without isolation: they share this user's files, processes and network", "why", refused.Error())
	}
	if refused == nil {
		if path, err := exec.LookPath("pasta"); err == nil {
			iso.Pasta = path
		} else if iso.Default == runtime.IsolationNamespaces {
			log.Warn("isolated sandboxes get no outside network: pasta (Debian's passt package) is not installed")
		}
	}
	return iso, refused, nil
}
