package daytona

import (
	"encoding/json"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// extensionKey is where this face keeps, with each sandbox, what only
// Daytona's API has (supervisor.Extensions); the core never reads it.
const extensionKey = "daytona"

// extension is what this face keeps with a sandbox: the auto-archive
// interval, kept and shown as Daytona does but never acting (0 is the
// longest), and the stop an archive was asked for at. Locally a stopped
// sandbox keeps its files where they are, which is all an archive keeps:
// an archived sandbox is one stopped by (or since) that stop, and a
// start, by any API, ends it (the next stop is another).
type extension struct {
	AutoArchiveMs int64     `json:"autoArchiveIntervalMs,omitempty"`
	ArchivedStop  time.Time `json:"archivedStop,omitzero"`
}

// archived reports whether sb is archived: stopped, by the stop its
// archive was asked at.
func (x extension) archived(sb supervisor.Sandbox) bool {
	return sb.State == supervisor.Stopped && !sb.StoppedAt.IsZero() && x.ArchivedStop.Equal(sb.StoppedAt)
}

// extensionOf is what this face keeps with sb; a value it cannot read
// (none was ever written by it) is the zero extension. A sandbox recorded
// before extensions has its interval among the record's fields the core
// does not know (supervisor.RecordExtension), under the same name.
func extensionOf(sb supervisor.Sandbox) extension {
	var x extension
	raw, ok := sb.Extensions[extensionKey]
	if !ok {
		raw, ok = sb.Extensions[supervisor.RecordExtension]
	}
	if ok {
		_ = json.Unmarshal(raw, &x)
	}
	return x
}

func (x extension) autoArchive() time.Duration {
	return time.Duration(x.AutoArchiveMs) * time.Millisecond
}

// raw is x as kept: nil (nothing kept) when x is zero.
func (x extension) raw() json.RawMessage {
	if x == (extension{}) {
		return nil
	}
	b, _ := json.Marshal(x)
	return b
}

// WithAutoArchive sets the auto-archive interval a create asks for, for
// Daytona's API to show: /v1 takes Daytona's create fields too.
func WithAutoArchive(req *supervisor.CreateRequest, d time.Duration) {
	raw := extension{AutoArchiveMs: d.Milliseconds()}.raw()
	if raw == nil {
		delete(req.Extensions, extensionKey)
		return
	}
	if req.Extensions == nil {
		req.Extensions = supervisor.Extensions{}
	}
	req.Extensions[extensionKey] = raw
}
