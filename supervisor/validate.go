package supervisor

import (
	"fmt"
	"net/netip"
	"regexp"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds on what a create may carry. Oversize input is refused, never
// truncated.
const (
	MaxLabels        = 64
	MaxLabelKeyLen   = 128
	MaxLabelValueLen = 512
	MaxEnv           = 256
	MaxEnvValueLen   = 32 << 10
	MaxSnapshotLen   = 256
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validName reports whether name is a valid sandbox name. Names become
// directory names, so the pattern admits no separators and no leading dot.
func validName(name string) bool { return nameRE.MatchString(name) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// ValidateName returns a *field.Error if name is not a valid sandbox
// name.
func ValidateName(name string) error {
	if !validName(name) {
		return field.Errorf(field.Name, "%q must match %s", Clip(name, MaxQuoted), nameRE)
	}
	return nil
}

// ValidateLabels checks label count, key and value sizes; a fault is a
// *field.Error.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return field.Errorf(field.Labels, "has %d entries; at most %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyLen || !utf8.ValidString(k) {
			return field.Errorf(field.Labels, "key %q must be 1 to %d bytes of UTF-8", Clip(k, MaxQuoted), MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen || !utf8.ValidString(v) {
			return field.Errorf(field.Labels, "%q: value must be at most %d bytes of UTF-8", Clip(k, MaxQuoted), MaxLabelValueLen)
		}
	}
	return nil
}

// ValidateEnv checks variables (names, sizes, the reserved ones), never
// echoing a value: it may be a secret. A fault is a *field.Error for
// field.Env, which each face renders with its own name for the field.
func ValidateEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return field.Errorf(field.Env, "has %d variables; at most %d", len(env), MaxEnv)
	}
	for k, v := range env {
		if !runtime.ValidEnvName(k) {
			return field.Errorf(field.Env, "key %q is not a valid variable name", Clip(k, MaxQuoted))
		}
		if runtime.Reserved(k) {
			return field.Errorf(field.Env, "key %s is reserved: the runtime sets it as the workload sees it", k)
		}
		if len(v) > MaxEnvValueLen {
			return field.Errorf(field.Env, "%s: value longer than %d bytes", k, MaxEnvValueLen)
		}
		if hasNUL(v) {
			return field.Errorf(field.Env, "%s: value contains a NUL byte", k)
		}
	}
	return nil
}

// Validate checks a create request against the supervisor's rules (name,
// labels, env, bounds). Create calls it; it is exported for callers that
// want to check before sending. A fault is a *field.Error.
func (r *CreateRequest) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	if err := ValidateLabels(r.Labels); err != nil {
		return err
	}
	if err := ValidateEnv(r.Env); err != nil {
		return err
	}
	if len(r.Snapshot) > MaxSnapshotLen {
		return field.Errorf(field.Snapshot, "longer than %d bytes", MaxSnapshotLen)
	}
	if r.AutoStopInterval != nil && *r.AutoStopInterval < 0 {
		return field.Errorf(field.AutoStop, "must not be negative")
	}
	if err := checkAllowList(r.Network.AllowList); err != nil {
		return err
	}
	return r.Extensions.check()
}

// MaxAllowList is how many networks an allow list names at most
// (Daytona's bound).
const MaxAllowList = 10

// checkAllowList checks a network allow list: IPv4 CIDRs, at most
// MaxAllowList.
func checkAllowList(list []string) error {
	if len(list) > MaxAllowList {
		return field.Errorf(field.NetworkAllowList, "names %d networks; at most %d", len(list), MaxAllowList)
	}
	for _, c := range list {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() {
			return field.Errorf(field.NetworkAllowList, "%q is not an IPv4 network in CIDR notation (10.0.0.0/8)", Clip(c, MaxQuoted))
		}
	}
	return nil
}

// MaxQuoted is how much of a caller's input an error message quotes.
const MaxQuoted = 100

// Clip returns s cut to at most n bytes at a character boundary, marked
// with … when cut: error messages quote at most that much of what a
// caller sent.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
