package daemon

import (
	"log/slog"

	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// publishAddress writes url where clients told no address look for it
// (auth.AddressFile, beside the token file) and returns what removes it
// at the daemon's end, only while it still holds url (a daemon started
// since wrote its own). A failure is logged: clients can still be told
// the address.
func publishAddress(tokenFile, url string, log *slog.Logger) (unpublish func()) {
	if err := auth.WriteAddress(tokenFile, url); err != nil {
		log.Warn("could not write the address file; clients need --url or $AGENT_CONTROL_PLANE_URL", "path", auth.AddressFile(tokenFile), "err", err)
		return func() {}
	}
	return func() { auth.RemoveAddress(tokenFile, url) }
}
