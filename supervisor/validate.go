package supervisor

import (
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds on what a create may carry. Oversize input is refused, never
// truncated.
const (
	MaxLabels        = 64
	MaxLabelKeyLen   = 128
	MaxLabelValueLen = 512
	MaxEnvVars       = 256
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

// ValidateName returns an ErrInvalid error if name is not a valid sandbox
// name.
func ValidateName(name string) error {
	if !validName(name) {
		return invalid("name %q must match %s", Clip(name, MaxQuoted), nameRE)
	}
	return nil
}

// ValidateLabels checks label count, key and value sizes.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return invalid("%d labels; at most %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyLen || !utf8.ValidString(k) {
			return invalid("label key %q must be 1 to %d bytes of UTF-8", Clip(k, MaxQuoted), MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen || !utf8.ValidString(v) {
			return invalid("label %q: value must be at most %d bytes of UTF-8", Clip(k, MaxQuoted), MaxLabelValueLen)
		}
	}
	return nil
}

// ValidateEnv checks variables given as field (names, sizes, the
// reserved ones), never echoing a value: it may be a secret.
func ValidateEnv(field string, env map[string]string) error {
	if len(env) > MaxEnvVars {
		return invalid("%d %s; at most %d", len(env), field, MaxEnvVars)
	}
	for k, v := range env {
		if !runtime.ValidEnvName(k) {
			return invalid("%s key %q is not a valid variable name", field, Clip(k, MaxQuoted))
		}
		if runtime.Reserved(k) {
			return invalid("%s key %s is reserved: the runtime sets it as the workload sees it", field, k)
		}
		if len(v) > MaxEnvValueLen {
			return invalid("%s %s: value longer than %d bytes", field, k, MaxEnvValueLen)
		}
		if hasNUL(v) {
			return invalid("%s %s: value contains a NUL byte", field, k)
		}
	}
	return nil
}

// Validate checks a create request against the supervisor's rules (name,
// labels, env, bounds). Create calls it; it is exported for callers that
// want to check before sending.
func (r *CreateRequest) Validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	if err := ValidateLabels(r.Labels); err != nil {
		return err
	}
	if err := ValidateEnv("envVars", r.Env); err != nil {
		return err
	}
	if len(r.Snapshot) > MaxSnapshotLen {
		return invalid("snapshot longer than %d bytes", MaxSnapshotLen)
	}
	if r.AutoStopInterval != nil && *r.AutoStopInterval < 0 {
		return invalid("autoStopInterval must be ≥ 0 minutes")
	}
	if r.AutoArchiveInterval != nil && *r.AutoArchiveInterval < 0 {
		return invalid("autoArchiveInterval must be ≥ 0 minutes")
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
