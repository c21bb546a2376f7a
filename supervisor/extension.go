package supervisor

import (
	"bytes"
	"encoding/json"
	"maps"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
)

// Extensions are what a face keeps with a sandbox that the core has no
// use for, as CRI keeps its metadata in a containerd extension that
// containerd never interprets: values of JSON under the face's own key,
// which the core bounds, persists, copies and returns but never reads.
// Keys in use: "daytona" (Daytona's face keeps its settings there: the
// auto-archive interval, the stop an archive was asked at), and
// RecordExtension, the core's own: the fields of a record that this
// version does not know (a record written before extensions kept
// Daytona's interval as its own field "autoArchiveIntervalMs"; the face
// reads it there). RecordExtension is bounded by the record's size, not
// by MaxExtensionBytes, so that no old record is refused an update.
//
// Like Labels, the map of a Sandbox is shared by every copy: read it,
// never write it; SetExtension replaces it.
type Extensions map[string]json.RawMessage

// Bounds of a sandbox's extensions: a face keeps small settings there,
// not data.
const (
	MaxExtensions      = 8
	MaxExtensionKeyLen = 64
	MaxExtensionBytes  = 4 << 10 // all values together
)

// RecordExtension is the extension that holds the fields of a sandbox's
// record that this version does not know, as an object: kept, never read
// by the core.
const RecordExtension = "record"

// check refuses extensions past the bounds or values that are not JSON.
func (x Extensions) check() error {
	if len(x) > MaxExtensions {
		return field.Errorf(field.Extension, "has %d keys; at most %d", len(x), MaxExtensions)
	}
	total := 0
	for k, v := range x {
		if k == "" || len(k) > MaxExtensionKeyLen || !utf8.ValidString(k) {
			return field.Errorf(field.Extension, "key %q must be 1 to %d bytes of UTF-8", Clip(k, MaxQuoted), MaxExtensionKeyLen)
		}
		if !json.Valid(v) {
			return field.Errorf(field.Extension, "%q: value is not JSON", Clip(k, MaxQuoted))
		}
		if k != RecordExtension {
			total += len(v)
		}
	}
	if total > MaxExtensionBytes {
		return field.Errorf(field.Extension, "values hold %d bytes; at most %d", total, MaxExtensionBytes)
	}
	return nil
}

// with is a copy of x with key set to v (removed when v is nil).
func (x Extensions) with(key string, v json.RawMessage) Extensions {
	out := maps.Clone(x)
	if v == nil {
		delete(out, key)
		if len(out) == 0 {
			return nil
		}
		return out
	}
	if out == nil {
		out = Extensions{}
	}
	out[key] = compact(v)
	return out
}

// compact is v without insignificant space (a record is written
// indented, which indents its values too); v as it is when it is no JSON.
func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return append(json.RawMessage(nil), v...)
	}
	return b.Bytes()
}

// clone is a deep copy of x, its values compacted, nil when x is empty.
func (x Extensions) clone() Extensions {
	if len(x) == 0 {
		return nil
	}
	out := make(Extensions, len(x))
	for k, v := range x {
		out[k] = compact(v)
	}
	return out
}

// SetExtension sets the value a face keeps under key with a sandbox, in
// any state (nil removes it). It is no activity and needs no workload.
func (s *Supervisor) SetExtension(id, key string, value json.RawMessage) (Sandbox, error) {
	return s.update(id, func(sb *Sandbox) error {
		ext := sb.Extensions.with(key, value)
		if err := ext.check(); err != nil {
			return err
		}
		sb.Extensions = ext
		return nil
	})
}
