package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"

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
	if err := writeFileAtomic(path, data); err != nil {
		log.Warn("could not write the address file; clients need --url or $AGENT_CONTROL_PLANE_URL", "path", path, "err", err)
		return func() {}
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
			_ = os.Remove(path)
		}
	}
}

// writeFileAtomic replaces path with data (0600), a reader seeing the
// old content or the new.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".address-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
