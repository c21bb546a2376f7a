package runtime

import "strings"

// ExpandArgv expands environment references in argv as systemd does in
// ExecStart: "${NAME}" anywhere in an argument is replaced by NAME's value;
// an argument that is exactly "$NAME" is replaced by NAME's value split at
// whitespace (no words when it is empty); "$$" is a literal "$". An
// unset variable expands to nothing. Any other "$" stays as it is. env
// holds KEY=VALUE entries; the last one of a key wins.
func ExpandArgv(argv, env []string) []string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	out := make([]string, 0, len(argv))
	for _, a := range argv {
		if name, ok := strings.CutPrefix(a, "$"); ok && ValidEnvName(name) {
			out = append(out, strings.Fields(vars[name])...)
			continue
		}
		out = append(out, expandWord(a, vars))
	}
	return out
}

// expandWord replaces "${NAME}" and "$$" in s.
func expandWord(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 || !ValidEnvName(s[i+2:i+2+end]) {
				b.WriteByte('$')
				continue
			}
			b.WriteString(vars[s[i+2:i+2+end]])
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// ValidEnvName reports whether s is a portable environment variable name
// (letters, digits and underscores, not starting with a digit; at most 256
// bytes).
func ValidEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
