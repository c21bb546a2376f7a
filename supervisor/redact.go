package supervisor

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Redacted replaces every secret in redacted output.
const Redacted = "[REDACTED]"

// secretKeyRE matches env keys whose values are treated as secrets.
var secretKeyRE = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASSW|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION)`)

// SecretKey reports whether an env key names a secret.
func SecretKey(k string) bool { return secretKeyRE.MatchString(k) }

// tokenRE matches well-known credential shapes, wherever they appear.
var tokenRE = regexp.MustCompile(strings.Join([]string{
	`(?i:bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*`,
	`eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}`, // JWT
	`sk-[A-Za-z0-9_-]{16,}`,                                         // OpenAI, Anthropic (sk-ant-…)
	`gh[pousr]_[A-Za-z0-9]{20,}`,                                    // GitHub
	`github_pat_[A-Za-z0-9_]{20,}`,
	`glpat-[A-Za-z0-9_-]{20,}`,     // GitLab
	`xox[abprs]-[A-Za-z0-9-]{10,}`, // Slack
	`AKIA[0-9A-Z]{16}`,             // AWS access key id
	`AIza[0-9A-Za-z_-]{35}`,        // Google API key
}, "|"))

// assignRE matches secret-named assignments: KEY=value, "key": "value",
// and the same inside one level of JSON escaping. A quoted value runs to
// its closing quote, so \" and \\ inside it do not end the match.
var assignRE = regexp.MustCompile(`(?i)` +
	// "api_key": "v\"al\\ue"  or  api_key="..."
	`([A-Za-z0-9_.-]*(?:key|token|secret|passw(?:or)?d|auth|credential)[A-Za-z0-9_.-]*(?:\\?")?\s*[:=]\s*)` +
	`("(?:[^"\\]|\\.)*"` + // JSON string: units are a plain char or \ and any char
	// The same string inside another JSON string: \" … \", whose units
	// are a plain char, \\\" (an escaped quote), \\\\ (an escaped
	// backslash) or \\ and another char.
	`|\\"(?:[^"\\]|\\\\\\"|\\\\\\\\|\\\\[^"\\])*\\"` +
	`|[^\s"',;&]+)`) // bare value

// Redactor removes secrets from text: the given values in their plain,
// JSON-escaped and doubly JSON-escaped forms, well-known token shapes, and
// values assigned to secret-named keys.
type Redactor struct {
	values *strings.Replacer
}

// minSecretLen is the shortest value redacted by value: shorter ones ("1",
// "on") would shred ordinary text without protecting anything.
const minSecretLen = 4

// NewRedactor returns a Redactor for the given secret values.
func NewRedactor(secrets []string) *Redactor {
	var forms []string
	for _, s := range secrets {
		if len(s) < minSecretLen {
			continue
		}
		once := jsonEscape(s)
		forms = append(forms, s, once, jsonEscape(once))
	}
	// Longest first: at one position the replacer tries patterns in order.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	forms = slices.Compact(forms)
	var pairs []string
	for _, f := range forms {
		pairs = append(pairs, f, Redacted)
	}
	r := &Redactor{}
	if len(pairs) > 0 {
		r.values = strings.NewReplacer(pairs...)
	}
	return r
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	out := string(b[1 : len(b)-1])
	// json.Marshal escapes <, > and & for HTML; logs carry them raw.
	out = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(out)
	return out
}

// Redact returns s with every secret replaced by Redacted. Replacements
// cover whole matches of valid strings, so no UTF-8 character is split.
func (r *Redactor) Redact(s string) string {
	if r.values != nil {
		s = r.values.Replace(s)
	}
	s = tokenRE.ReplaceAllString(s, Redacted)
	s = assignRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := assignRE.FindStringSubmatch(m)
		v := sub[2]
		switch {
		case v == Redacted || v == `"`+Redacted+`"` || v == `\"`+Redacted+`\"`:
			return m
		case strings.HasPrefix(v, `\"`):
			return sub[1] + `\"` + Redacted + `\"`
		case strings.HasPrefix(v, `"`):
			return sub[1] + `"` + Redacted + `"`
		}
		return sub[1] + Redacted
	})
	return s
}

// Logs are a sandbox's entrypoint logs, redacted.
type Logs struct {
	Stdout string
	Stderr string
}

// DefaultLogTail is how much of each log EntrypointLogs returns.
const DefaultLogTail = 64 << 10

// EntrypointLogs returns the last tail bytes of the sandbox's stdout and
// stderr, redacted with the secret values of its own environment.
func (s *Supervisor) EntrypointLogs(id string, tail int) (Logs, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Logs{}, err
	}
	if tail <= 0 {
		tail = DefaultLogTail
	}
	r := NewRedactor(s.secretsOf(e))
	var out Logs
	for _, f := range []struct {
		name string
		dst  *string
	}{{StdoutFile, &out.Stdout}, {StderrFile, &out.Stderr}} {
		text, err := readTail(filepath.Join(e.dir, f.name), tail)
		if err != nil {
			return Logs{}, err
		}
		*f.dst = clipStart(r.Redact(text), tail)
	}
	return out, nil
}

// secretsOf returns the values of e's env whose keys look secret, plus
// every forwarded credential.
func (s *Supervisor) secretsOf(e *sandbox) []string {
	var out []string
	for _, v := range s.opts.ForwardEnv {
		out = append(out, v)
	}
	b, err := os.ReadFile(filepath.Join(e.dir, EnvFile))
	if err != nil {
		return out
	}
	var env map[string]string
	if json.Unmarshal(b, &env) != nil {
		return out
	}
	for k, v := range env {
		if SecretKey(k) {
			out = append(out, v)
		}
	}
	return out
}

// readTail reads the end of a log: the last tail bytes plus a margin so
// that redaction sees a secret whole even where the window starts. A window
// that does not start at the file's start drops its first, partial line.
func readTail(path string, tail int) (string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	window := int64(tail) + 64<<10
	off := max(fi.Size()-window, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return "", err
	}
	if off > 0 {
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), nil
}

// clipStart keeps the last n bytes of s, starting at a character boundary.
func clipStart(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
