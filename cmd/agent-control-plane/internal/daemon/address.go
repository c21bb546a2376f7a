package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/service"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// publishAddress writes url where clients told no address look for it
// (auth.AddressFile, beside the token file), replacing it atomically,
// and returns what removes it at the daemon's end: only while it still
// holds url (a daemon started since wrote its own). A failure is logged:
// clients can still be told the address.
func publishAddress(tokenFile, url string, log *slog.Logger) (unpublish func()) {
	path := auth.AddressFile(tokenFile)
	data := []byte(url + "\n")
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		err = service.WriteFileAtomic(path, data, 0o600)
	}
	if err != nil {
		log.Warn("could not write the address file; clients need --url or $AGENT_CONTROL_PLANE_URL", "path", path, "err", err)
		return func() {}
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
			_ = os.Remove(path)
		}
	}
}
