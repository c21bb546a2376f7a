package redact

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The regular-expression redactor this package used before it was made
// linear, kept as the reference for the pattern rules: on any text, the
// linear one must redact the same spans.
var refTokenRules = []struct {
	prefix string
	re     *regexp.Regexp
}{
	{"bearer", regexp.MustCompile(`^(?i:bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*`)},
	{"eyj", regexp.MustCompile(`^eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}`)},
	{"sk-", regexp.MustCompile(`^sk-[A-Za-z0-9_-]{16,}`)},
	{"gh", regexp.MustCompile(`^gh[pousr]_[A-Za-z0-9]{20,}`)},
	{"github_pat_", regexp.MustCompile(`^github_pat_[A-Za-z0-9_]{20,}`)},
	{"glpat-", regexp.MustCompile(`^glpat-[A-Za-z0-9_-]{20,}`)},
	{"xox", regexp.MustCompile(`^xox[abprs]-[A-Za-z0-9-]{10,}`)},
	{"akia", regexp.MustCompile(`^AKIA[0-9A-Z]{16}`)},
	{"aiza", regexp.MustCompile(`^AIza[0-9A-Za-z_-]{35}`)},
	{"sk_live_", regexp.MustCompile(`^sk_live_[A-Za-z0-9]{16,}`)},
	{"rk_live_", regexp.MustCompile(`^rk_live_[A-Za-z0-9]{16,}`)},
	{"sk_test_", regexp.MustCompile(`^sk_test_[A-Za-z0-9]{16,}`)},
	{"rk_test_", regexp.MustCompile(`^rk_test_[A-Za-z0-9]{16,}`)},
	{"acps_", regexp.MustCompile(`^acps_[A-Za-z0-9_-]{20,}`)},
}

var refAssignRE = regexp.MustCompile(`^(?i)` +
	`([A-Za-z0-9_.-]*(?:key|token|secret|passw(?:or)?d|auth|credential)[A-Za-z0-9_.-]*(?:\\?")?\s*[:=]\s*)` +
	`("(?:[^"\\]|\\(?s:.))*"` + // the old one had \\. here: a backslash before a newline ended no value; now it does
	`|\\"(?:[^"\\]|\\\\\\"|\\\\\\\\|\\\\[^"\\])*\\"` +
	`|[^\s"',;&]+)`)

func refRedact(s string) string {
	lower := asciiLower(s)
	var spans []span
	for _, rule := range refTokenRules {
		for pos := range indexAll(lower, rule.prefix) {
			if m := rule.re.FindStringIndex(s[pos:]); m != nil {
				spans = append(spans, span{pos, pos + m[1], Redacted})
			}
		}
	}
	seen := map[int]bool{}
	for _, w := range []string{"key", "token", "secret", "passw", "auth", "credential"} {
		for pos := range indexAll(lower, w) {
			k := pos
			for k > 0 && keyByte[s[k-1]] {
				k--
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			m := refAssignRE.FindStringSubmatchIndex(s[k:])
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
	return apply(s, slices.Clone(spans))
}

func FuzzRedactMatchesReference(f *testing.F) {
	for _, s := range []string{
		`{"api_key": "v\"al\\ue-unknown", "ok": 1}`, `"{\"password\":\"p\\\"w-unknown\"}"`,
		"DB_PASSWORD=hunter22 next", "Authorization: Bearer abcdefghijklmnop",
		"tok eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl here", "sk-sk-sk-proj-ABCDEFGHIJKLMNOPQRST",
		"ghp_AAAAghp_BBBBBBBBBBBBBBBBBBBBBBBB", "key=key=key=a,token=b", `key="abc token=SECRET`,
		`x=\"a\\\"b\" key=\"q\\\\\"r\\n\"`, "AKIAAKIAAKIAAKIAAKIAAKIAAKIA", "eyJeyJeyJ.eyJabcd.efgh",
	} {
		f.Add(s)
	}
	r := New(nil)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := r.Redact(s), refRedact(s); got != want {
			t.Fatalf("Redact(%q)\n got %q\nwant %q", s, got, want)
		}
	})
}
