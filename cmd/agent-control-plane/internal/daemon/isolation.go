package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
)

// initBeside is the init program beside this daemon's binary
// (agent-control-plane-init, which make build puts there), when it is a
// regular executable file that only its owner (this user or root) may
// change; "" otherwise, and the daemon's own binary serves as the init.
func initBeside(log *slog.Logger) string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	path := filepath.Join(filepath.Dir(self), "agent-control-plane-init")
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || fi.Mode()&0o022 != 0 || !ok || int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		log.Warn("the init beside the daemon is not used: it is not an executable only its owner may change", "path", path)
		return ""
	}
	return path
}

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
		iso.Init = initBeside(log)
		if path, err := exec.LookPath("pasta"); err == nil {
			iso.Pasta = path
		} else if iso.Default == runtime.IsolationNamespaces {
			log.Warn("isolated sandboxes get no outside network: pasta (Debian's passt package) is not installed")
		}
	}
	return iso, refused, nil
}
