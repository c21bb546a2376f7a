// This file is long because its scanners are one algorithm: each stays
// linear by sharing the spans the others found.

package redact

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Redacted replaces every secret in redacted output.
const Redacted = "[REDACTED]"

// secretKeyRE matches env keys whose values are treated as secrets.
var secretKeyRE = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|PRIVATE|COOKIE|SESSION)`)

// SecretKey reports whether an env key names a secret.
func SecretKey(k string) bool { return secretKeyRE.MatchString(k) }

// Redactor removes secrets from text: the given values in their plain,
// JSON-escaped and doubly JSON-escaped forms, well-known token shapes
// (bearer tokens, JWTs, sk-…, ghp_…, github_pat_…, glpat-…, xox…-, AKIA…,
// AIza…), and values assigned to secret-named keys (API_KEY=…,
// "password": "…", also inside one level of JSON escaping).
//
// Its work is linear in the length of the text, whatever the text holds:
// every scanner below either looks at a bounded number of bytes per
// candidate or remembers how far an earlier scan of the same kind got, so
// that no byte is scanned more than a few times. (A pattern run at every
// candidate, as regular expressions do, is quadratic on text such as
// "sk-sk-sk-…" or "key=key=key=…".)
type Redactor struct {
	forms []string // secret values in every form, longest first
}

// minSecretLen is the shortest value redacted by value: shorter ones ("1",
// "on") would shred ordinary text without protecting anything.
const minSecretLen = 4

// New returns a Redactor for the given secret values.
func New(secrets []string) *Redactor {
	var forms []string
	for _, s := range secrets {
		if len(s) < minSecretLen {
			continue
		}
		once := jsonEscape(s)
		forms = append(forms, s, once, jsonEscape(once))
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return &Redactor{forms: slices.Compact(forms)}
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	out := string(b[1 : len(b)-1])
	// json.Marshal escapes <, > and & for HTML; logs carry them raw.
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(out)
}

// span is a part of the text to replace.
type span struct {
	start, end int
	repl       string
}

// Redact returns s with every secret replaced by Redacted.
func (r *Redactor) Redact(s string) string {
	out, _ := r.RedactContext(context.Background(), s)
	return out
}

// RedactContext is Redact that gives up, returning ctx's error, once ctx
// ends. Replacements cover whole matches of valid strings, so no UTF-8
// character is split.
func (r *Redactor) RedactContext(ctx context.Context, s string) (string, error) {
	spans, err := r.find(ctx, s)
	if err != nil {
		return "", err
	}
	return apply(s, spans), nil
}

// RedactParts redacts s as one text, so that a secret spanning two parts
// (a multi-line value, line by line) is found, and returns each part
// redacted: s cut at offsets ends (ascending, the last len(s)). A
// redaction across a cut is replaced in every part it touches, but for
// the line break a part ends with.
func (r *Redactor) RedactParts(ctx context.Context, s string, ends []int) ([]string, error) {
	spans, err := r.find(ctx, s)
	if err != nil {
		return nil, err
	}
	starts := make([]int, len(ends))
	for i := 1; i < len(ends); i++ {
		starts[i] = ends[i-1]
	}
	in := make([][]span, len(ends))
	for _, sp := range spans {
		// Each part the span touches gets its piece of it.
		for i, _ := slices.BinarySearch(ends, sp.start+1); i < len(ends) && starts[i] < sp.end; i++ {
			from, to := max(sp.start, starts[i]), min(sp.end, ends[i])
			if to == ends[i] && s[to-1] == '\n' {
				to-- // a part's line break stays: lines stay lines
			}
			if from < to {
				in[i] = append(in[i], span{from - starts[i], to - starts[i], sp.repl})
			}
		}
	}
	out := make([]string, len(ends))
	for i, end := range ends {
		out[i] = apply(s[starts[i]:end], in[i])
	}
	return out, nil
}

// find returns the spans of s to redact.
func (r *Redactor) find(ctx context.Context, s string) ([]span, error) {
	var spans []span
	for _, f := range r.forms {
		// strings.Index is linear in the text whatever the value (it
		// falls back to Rabin-Karp), unlike a trie walked at every byte.
		for i := 0; ; {
			j := strings.Index(s[i:], f)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(f), Redacted})
			i += j + len(f)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	lower := asciiLower(s)
	for _, rule := range tokenRules {
		spans = rule.find(s, lower, spans)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return findAssignments(ctx, s, lower, spans)
}

// apply replaces spans in s. Overlapping spans merge into one redaction
// covering them all.
func apply(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return b.end - a.end
	})
	var out strings.Builder
	out.Grow(len(s))
	cur, last := spans[0], 0
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

// class is a set of bytes.
type class [256]bool

func newClass(ranges ...string) *class {
	var c class
	for _, r := range ranges {
		if len(r) == 3 && r[1] == '-' {
			for b := int(r[0]); b <= int(r[2]); b++ {
				c[b] = true
			}
			continue
		}
		for i := 0; i < len(r); i++ {
			c[r[i]] = true
		}
	}
	return &c
}

var (
	alnum      = newClass("a-z", "A-Z", "0-9")
	alnumUS    = newClass("a-z", "A-Z", "0-9", "_")
	alnumUSD   = newClass("a-z", "A-Z", "0-9", "_", "-")
	alnumD     = newClass("a-z", "A-Z", "0-9", "-")
	upperDigit = newClass("A-Z", "0-9")
	bearerTok  = newClass("a-z", "A-Z", "0-9", "-._~+/")
	space      = newClass(" \t\n\f\r") // regexp's \s
	keyByte    = newClass("a-z", "A-Z", "0-9", "_.-")
	// A bare assigned value: anything but white space and " ' , ; &.
	bareValue = func() *class {
		c := newClass()
		for b := range c {
			c[b] = true
		}
		for _, b := range []byte(" \t\n\f\r\"',;&") {
			c[b] = false
		}
		return c
	}()
)

// runEnd returns the end of the run of c's bytes that starts at i.
func runEnd(s string, i int, c *class) int {
	for i < len(s) && c[s[i]] {
		i++
	}
	return i
}

// tokenRule finds one well-known credential shape: a literal head (found
// in the lowered text, then checked in its exact case) followed by a run
// of class bytes: at least min of them, or exactly fixed.
type tokenRule struct {
	lit   string // lower case, for the search
	head  string // exact case; a byte '?' stands for any of alts
	alts  string
	body  *class
	min   int
	fixed int
}

var tokenRules = []interface {
	find(s, lower string, spans []span) []span
}{
	bearerRule{},
	jwtRule{},
	&tokenRule{lit: "sk-", head: "sk-", body: alnumUSD, min: 16},                // OpenAI, Anthropic (sk-ant-…)
	&tokenRule{lit: "gh", head: "gh?_", alts: "pousr", body: alnum, min: 20},    // GitHub
	&tokenRule{lit: "github_pat_", head: "github_pat_", body: alnumUS, min: 20}, // GitHub fine-grained
	&tokenRule{lit: "glpat-", head: "glpat-", body: alnumUSD, min: 20},          // GitLab
	&tokenRule{lit: "xox", head: "xox?-", alts: "abprs", body: alnumD, min: 10}, // Slack
	&tokenRule{lit: "akia", head: "AKIA", body: upperDigit, fixed: 16},          // AWS access key id
	&tokenRule{lit: "aiza", head: "AIza", body: alnumUSD, fixed: 35},            // Google API key
	&tokenRule{lit: "sk_live_", head: "sk_live_", body: alnum, min: 16},         // Stripe
	&tokenRule{lit: "rk_live_", head: "rk_live_", body: alnum, min: 16},         // Stripe restricted
	&tokenRule{lit: "sk_test_", head: "sk_test_", body: alnum, min: 16},         // Stripe
	&tokenRule{lit: "rk_test_", head: "rk_test_", body: alnum, min: 16},         // Stripe restricted
	&tokenRule{lit: "acps_", head: "acps_", body: alnumUSD, min: 20},            // a dashboard session's secret (this daemon's)
}

// URLPassword is the password of a URL's user information in v
// ("postgres://user:password@host/db"), or "" if it has none: a secret
// inside a value whose name does not say so.
func URLPassword(v string) string {
	for i := range indexAll(v, "://") {
		rest := v[i+3:]
		end := strings.IndexAny(rest, "/?# \t\n")
		if end < 0 {
			end = len(rest)
		}
		at := strings.LastIndexByte(rest[:end], '@')
		if at < 0 {
			continue
		}
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
			return pw
		}
	}
	return ""
}

func (t *tokenRule) headAt(s string, p int) bool {
	if len(s)-p < len(t.head) {
		return false
	}
	for i := 0; i < len(t.head); i++ {
		if c := s[p+i]; t.head[i] == '?' && !strings.ContainsRune(t.alts, rune(c)) || t.head[i] != '?' && c != t.head[i] {
			return false
		}
	}
	return true
}

// find adds a span for every match. A candidate whose body would start
// inside the body run of the previous candidate ends where that run ends:
// its match, if any, lies inside the previous one, so it is skipped and
// no run is scanned twice.
func (t *tokenRule) find(s, lower string, spans []span) []span {
	prevStart, prevEnd := -1, -1
	for p := range indexAll(lower, t.lit) {
		if !t.headAt(s, p) {
			continue
		}
		bs := p + len(t.head)
		if t.fixed > 0 {
			if len(s)-bs >= t.fixed && runEnd(s[:bs+t.fixed], bs, t.body) == bs+t.fixed {
				spans = append(spans, span{p, bs + t.fixed, Redacted})
			}
			continue
		}
		if bs > prevStart && bs < prevEnd {
			continue
		}
		e := runEnd(s, bs, t.body)
		prevStart, prevEnd = bs, e
		if e-bs >= t.min {
			spans = append(spans, span{p, e, Redacted})
		}
	}
	return spans
}

// bearerRule: "bearer" in any case, white space, at least 8 token bytes,
// then any '='. Candidates' white-space and token runs never overlap (a
// candidate inside another's token run is followed by no white space), so
// each byte is scanned once.
type bearerRule struct{}

func (bearerRule) find(s, lower string, spans []span) []span {
	for p := range indexAll(lower, "bearer") {
		ws := p + len("bearer")
		ts := runEnd(s, ws, space)
		if ts == ws {
			continue
		}
		te := runEnd(s, ts, bearerTok)
		if te-ts < 8 {
			continue
		}
		for te < len(s) && s[te] == '=' {
			te++
		}
		spans = append(spans, span{p, te, Redacted})
	}
	return spans
}

// jwtRule: eyJ<seg>.eyJ<seg>.<seg>, each segment at least 4 base64url
// bytes. A candidate inside the first segment of the previous one shares
// its segment ends, so it is skipped; every segment run is then scanned at
// most three times (as a first, second or third segment).
type jwtRule struct{}

func (jwtRule) find(s, _ string, spans []span) []span {
	seg := func(i int) (int, bool) {
		e := runEnd(s, i, alnumUSD)
		return e, e-i >= 4
	}
	prevStart, prevEnd := -1, -1
	for p := range indexAll(s, "eyJ") {
		if p+3 > prevStart && p+3 < prevEnd {
			continue
		}
		e1, ok := seg(p + 3)
		prevStart, prevEnd = p+3, e1
		if !ok || !strings.HasPrefix(s[e1:], ".eyJ") {
			continue
		}
		e2, ok := seg(e1 + 4)
		if !ok || e2 >= len(s) || s[e2] != '.' {
			continue
		}
		if e3, ok := seg(e2 + 1); ok {
			spans = append(spans, span{p, e3, Redacted})
		}
	}
	return spans
}

// secretKeyWords make a key's assigned value secret.
var secretKeyWords = []string{"key", "token", "secret", "passwd", "password", "auth", "credential"}

// findAssignments finds values assigned to secret-named keys: KEY=value,
// "key": "value", and the same inside one level of JSON escaping. Keys are
// the text's maximal runs of key bytes, taken in order; the white space,
// separators and values after one key end before the next key starts, and
// the quoted-string scanners remember their last scan, so the whole walk
// is linear.
func findAssignments(ctx context.Context, s, lower string, spans []span) ([]span, error) {
	var jsonStr, escStr strScanner
	jsonStr.unit = jsonUnit
	escStr.unit = escapedUnit
	bareStart, bareEnd := -1, -1 // the last bare value's run
	for k, n := 0, 0; k < len(s); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !keyByte[s[k]] {
			k++
			continue
		}
		ke := runEnd(s, k, keyByte)
		key := lower[k:ke]
		k = ke
		if !containsAny(key, secretKeyWords) {
			continue
		}
		// (\\?")? \s* [:=] \s*
		q := ke
		if strings.HasPrefix(s[q:], `\"`) {
			q += 2
		} else if q < len(s) && s[q] == '"' {
			q++
		}
		q = runEnd(s, q, space)
		if q >= len(s) || s[q] != ':' && s[q] != '=' {
			continue
		}
		vs := runEnd(s, q+1, space)
		ve, repl := -1, Redacted
		switch {
		case vs < len(s) && s[vs] == '"':
			if e, ok := jsonStr.end(s, vs, 1); ok {
				ve, repl = e, `"`+Redacted+`"`
			}
		case strings.HasPrefix(s[vs:], `\"`):
			if e, ok := escStr.end(s, vs, 2); ok {
				ve, repl = e, `\"`+Redacted+`\"`
			}
		}
		if ve < 0 {
			// A bare value starting inside the last one ends where it
			// does ("key=key=key=…"): no run is scanned twice.
			e := bareEnd
			if vs < bareStart || vs >= bareEnd {
				e = runEnd(s, vs, bareValue)
				bareStart, bareEnd = vs, e
			}
			if e > vs {
				ve, repl = e, Redacted
			}
		}
		if ve < 0 {
			continue
		}
		switch v := s[vs:ve]; v {
		case Redacted, `"` + Redacted + `"`, `\"` + Redacted + `\"`:
			continue
		}
		spans = append(spans, span{vs, ve, repl})
		// The value may hold more keys (key=a,token=b): the walk goes on
		// from the value's start, not its end.
	}
	return spans, nil
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// strScanner finds the end of a quoted string that starts at an opening
// quote, unit by unit. It remembers its last scan: a later opening quote
// inside that scan can only be part of an escape unit of it (an unescaped
// one would have closed or failed it), so the scan from there continues in
// step with the last one and ends the same way. Each byte is scanned once.
type strScanner struct {
	unit          func(s string, i int) (n int, closed bool)
	start, stop   int
	closed, valid bool
}

// end returns the index after the closing quote of the string whose
// opening quote (open bytes long) is at q, and whether it closes at all.
func (sc *strScanner) end(s string, q, open int) (int, bool) {
	if sc.valid && q > sc.start && q+open <= sc.stop && !(sc.closed && q+open == sc.stop) {
		return sc.stop, sc.closed
	}
	i := q + open
	for {
		n, closed := sc.unit(s, i)
		if n == 0 {
			sc.start, sc.stop, sc.closed, sc.valid = q, i, false, true
			return i, false
		}
		i += n
		if closed {
			sc.start, sc.stop, sc.closed, sc.valid = q, i, true, true
			return i, true
		}
	}
}

// jsonUnit is one unit of a JSON string body: a plain byte, or a backslash
// and any byte; or the closing quote.
func jsonUnit(s string, i int) (int, bool) {
	switch {
	case i >= len(s):
		return 0, false
	case s[i] == '"':
		return 1, true
	case s[i] == '\\':
		if i+1 >= len(s) {
			return 0, false
		}
		return 2, false
	}
	return 1, false
}

// escapedUnit is one unit of a JSON string inside a JSON string: a plain
// byte, \\\" (an escaped quote), \\\\ (an escaped backslash), \\ and
// another byte; or the closing \".
func escapedUnit(s string, i int) (int, bool) {
	switch {
	case i >= len(s):
		return 0, false
	case strings.HasPrefix(s[i:], `\"`):
		return 2, true
	case s[i] == '"':
		return 0, false
	case strings.HasPrefix(s[i:], `\\\"`), strings.HasPrefix(s[i:], `\\\\`):
		return 4, false
	case strings.HasPrefix(s[i:], `\\`) && i+2 < len(s) && s[i+2] != '"' && s[i+2] != '\\':
		return 3, false
	case s[i] == '\\':
		return 0, false
	}
	return 1, false
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
