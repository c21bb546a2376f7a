package supervisor

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
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

// tokenRules find well-known credential shapes. Each starts with a literal
// (matched case-insensitively in the text) and continues with an anchored
// pattern, so the text is scanned for literals and the patterns run only
// where one occurs.
var tokenRules = []struct {
	prefix string // lower case
	re     *regexp.Regexp
}{
	{"bearer", regexp.MustCompile(`^(?i:bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*`)},
	{"eyj", regexp.MustCompile(`^eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}`)}, // JWT
	{"sk-", regexp.MustCompile(`^sk-[A-Za-z0-9_-]{16,}`)},                                         // OpenAI, Anthropic (sk-ant-…)
	{"gh", regexp.MustCompile(`^gh[pousr]_[A-Za-z0-9]{20,}`)},                                     // GitHub
	{"github_pat_", regexp.MustCompile(`^github_pat_[A-Za-z0-9_]{20,}`)},
	{"glpat-", regexp.MustCompile(`^glpat-[A-Za-z0-9_-]{20,}`)},  // GitLab
	{"xox", regexp.MustCompile(`^xox[abprs]-[A-Za-z0-9-]{10,}`)}, // Slack
	{"akia", regexp.MustCompile(`^AKIA[0-9A-Z]{16}`)},            // AWS access key id
	{"aiza", regexp.MustCompile(`^AIza[0-9A-Za-z_-]{35}`)},       // Google API key
}

// secretWords start the names of keys whose assigned values are secret.
var secretWords = []string{"key", "token", "secret", "passw", "auth", "credential"}

// assignRE matches, from the start of a key, a secret-named assignment:
// KEY=value, "key": "value", and the same inside one level of JSON
// escaping. A quoted value runs to its closing quote, so \" and \\ inside
// it do not end the match.
var assignRE = regexp.MustCompile(`^(?i)` +
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

// span is a part of the text to replace.
type span struct {
	start, end int
	repl       string
}

// Redact returns s with every secret replaced by Redacted. Replacements
// cover whole matches of valid strings, so no UTF-8 character is split.
func (r *Redactor) Redact(s string) string {
	if r.values != nil {
		s = r.values.Replace(s)
	}
	lower := asciiLower(s)
	var spans []span
	for _, rule := range tokenRules {
		for pos := range indexAll(lower, rule.prefix) {
			if m := rule.re.FindStringIndex(s[pos:]); m != nil {
				spans = append(spans, span{pos, pos + m[1], Redacted})
			}
		}
	}
	seen := map[int]bool{} // key starts already tried
	for _, w := range secretWords {
		for pos := range indexAll(lower, w) {
			k := pos
			for k > 0 && isKeyByte(s[k-1]) {
				k--
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			m := assignRE.FindStringSubmatchIndex(s[k:])
			if m == nil {
				continue
			}
			v := s[k+m[4] : k+m[5]]
			repl := Redacted
			switch {
			case v == Redacted || v == `"`+Redacted+`"` || v == `\"`+Redacted+`\"`:
				continue
			case strings.HasPrefix(v, `\"`):
				repl = `\"` + Redacted + `\"`
			case strings.HasPrefix(v, `"`):
				repl = `"` + Redacted + `"`
			}
			spans = append(spans, span{k + m[4], k + m[5], repl})
		}
	}
	if len(spans) == 0 {
		return s
	}
	// Overlapping finds merge into one redaction covering them all.
	slices.SortFunc(spans, func(a, b span) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return b.end - a.end
	})
	var out strings.Builder
	out.Grow(len(s))
	cur := spans[0]
	last := 0
	flush := func(sp span) {
		out.WriteString(s[last:sp.start])
		out.WriteString(sp.repl)
		last = sp.end
	}
	for _, sp := range spans[1:] {
		if sp.start < cur.end {
			if sp.end > cur.end {
				cur.end, cur.repl = sp.end, Redacted
			}
			continue
		}
		flush(cur)
		cur = sp
	}
	flush(cur)
	out.WriteString(s[last:])
	return out.String()
}

// indexAll yields every index of sub in s.
func indexAll(s, sub string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for i := 0; ; {
			j := strings.Index(s[i:], sub)
			if j < 0 || !yield(i+j) {
				return
			}
			i += j + 1
		}
	}
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// asciiLower lowers ASCII letters only, so byte offsets stay the same.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
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
		text, err := s.readTail(e.id+"/"+f.name, tail)
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
	b, err := s.fs.readFile(e.id+"/"+EnvFile, maxEnvBytes)
	if err != nil {
		s.log.Warn("read sandbox environment for redaction", "sandbox", e.id, "err", err)
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
// The log is opened as the daemon's own file: a link or a FIFO planted in
// its place is refused at once, never followed or waited on.
func (s *Supervisor) readTail(rel string, tail int) (string, error) {
	f, fi, err := s.fs.openRegular(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
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
