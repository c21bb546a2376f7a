package supervisor

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRedact(t *testing.T) {
	const quoted = `pa"ss\word`     // contains a quote and a backslash
	const trailing = `endswith\`    // ends in a backslash
	const unicode = "clé-secrète-ü" // multibyte
	r := NewRedactor([]string{"s3cr3t-value", quoted, trailing, unicode, "no"})
	once := func(s string) string { b, _ := json.Marshal(s); return string(b[1 : len(b)-1]) }
	tests := []struct {
		why, in string
		leak    []string
	}{
		{"plain", "token is s3cr3t-value.", []string{"s3cr3t-value"}},
		{"json-escaped quote and backslash", `{"v":"` + once(quoted) + `"}`, []string{`ss\\word`, "pa\\\"ss"}},
		{"doubly escaped", `"{\"v\":\"` + once(once(quoted)) + `\"}"`, []string{"ss", "word"}},
		{"plain with quote", "pw=" + quoted + " done", []string{"word"}},
		{"trailing backslash plain", "x " + trailing + " y", []string{"endswith"}},
		{"trailing backslash escaped", `{"v":"` + once(trailing) + `"}`, []string{"endswith"}},
		{"unicode", "value " + unicode + " end", []string{"secrète"}},
		{"bearer", "Authorization: Bearer abcdefghijklmnop", []string{"abcdefghijklmnop"}},
		{"jwt", "tok eyJhbGciOi.eyJzdWIiOiIx.c2lnbmF0dXJl here", []string{"eyJzdWIi"}},
		{"openai key", "key sk-proj-ABCDEFGHIJKLMNOPQRST", []string{"ABCDEFGHIJKLMNOPQRST"}},
		{"github token", "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123", []string{"ABCDEFGHIJ"}},
		{"json assignment", `{"api_key": "v\"al\\ue-unknown", "ok": 1}`, []string{`al\\ue`, "unknown"}},
		{"escaped json assignment", `"{\"password\":\"p\\\"w-unknown\"}"`, []string{"unknown"}},
		{"env assignment", "DB_PASSWORD=hunter22 next", []string{"hunter22"}},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			out := r.Redact(tc.in)
			for _, l := range tc.leak {
				if strings.Contains(out, l) {
					t.Fatalf("Redact(%q) = %q: leaks %q", tc.in, out, l)
				}
			}
			if !strings.Contains(out, Redacted) {
				t.Fatalf("Redact(%q) = %q: nothing redacted", tc.in, out)
			}
			if !utf8.ValidString(out) {
				t.Fatalf("Redact split a character: %q", out)
			}
		})
	}
	// Short values and ordinary text are left alone.
	if out := r.Redact("no news is good news"); out != "no news is good news" {
		t.Fatalf("ordinary text changed: %q", out)
	}
}

func TestClipStartKeepsCharacters(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	for n := 0; n <= 21; n++ {
		out := clipStart(s, n)
		if !utf8.ValidString(out) || len(out) > n {
			t.Fatalf("clipStart(%d) = %q", n, out)
		}
	}
}

func TestRedactBareValueWithBackslash(t *testing.T) {
	out := NewRedactor(nil).Redact(`PASSWORD=abc\def next`)
	if strings.Contains(out, "def") || strings.Contains(out, "abc") {
		t.Fatalf("leaked: %q", out)
	}
}
