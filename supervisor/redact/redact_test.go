package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRedact(t *testing.T) {
	const quoted = `pa"ss\word`     // contains a quote and a backslash
	const trailing = `endswith\`    // ends in a backslash
	const unicode = "clé-secrète-ü" // multibyte
	r := New([]string{"s3cr3t-value", quoted, trailing, unicode, "no"})
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
		{"a Stripe restricted key", "key rk_live_51HabcdefGHIJKLMNOPqrs in use", []string{"rk_live_51HabcdefGHIJKLMNOPqrs"}},
		{"a dashboard session's secret", "Bearer-less acps_abcdefghijklmnopqrstuvwxyz012345 here", []string{"acps_abcdefghijklmnopqrstuvwxyz012345"}},
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

func TestRedactBareValueWithBackslash(t *testing.T) {
	out := New(nil).Redact(`PASSWORD=abc\def next`)
	if strings.Contains(out, "def") || strings.Contains(out, "abc") {
		t.Fatalf("leaked: %q", out)
	}
}

// adversarialInputs are texts that made the regular-expression redactor
// quadratic, each cut to 64 KiB.
func adversarialInputs() map[string]string {
	cut := func(s string) string { return s[:64<<10] }
	return map[string]string{
		"sk-x20k":      cut(strings.Repeat("sk-", 22000)),
		"key=x20k":     cut(strings.Repeat("key=", 20000)),
		`\"x32k`:       cut(strings.Repeat(`\"`, 33000)),
		"token x10k":   cut(strings.Repeat("token ", 11000)),
		"eyJx22k":      cut(strings.Repeat("eyJ", 22000)),
		`key="\"x16k`:  cut(`key="` + strings.Repeat(`\"`, 33000)),
		`key=\"x16k`:   cut(strings.Repeat(`key=\"\\\"`, 8000)),
		"bearer space": cut(strings.Repeat("bearer "+strings.Repeat(" ", 50), 1300)),
		"ghp_x16k":     cut(strings.Repeat("ghp_", 17000)),
		"passwd:x8k":   cut(strings.Repeat(`"passwd":"`, 7000)),
	}
}

// plainLog is 64 KiB of ordinary log lines.
func plainLog() string {
	var b strings.Builder
	for i := 0; b.Len() < 64<<10; i++ {
		fmt.Fprintf(&b, "2026-11-29T10:22:%02d.%03dZ INFO request served method=GET path=/api/items/%d status=200 duration=%dms\n", i%60, i%1000, i, i%97)
	}
	return b.String()[:64<<10]
}

// Redaction costs a bounded amount per byte whatever the text: 64 KiB of
// any adversarial input costs at most 50 times what 64 KiB of plain log
// costs. Each is timed as the best of several runs, so that a busy
// machine slows both sides alike.
func TestRedactLinearOnAdversarialInput(t *testing.T) {
	r := New([]string{"s3cr3t-value-123", `pa"ss\word`})
	best := func(s string) time.Duration {
		b := time.Duration(1 << 62)
		for range 15 {
			start := time.Now()
			r.Redact(s)
			b = min(b, time.Since(start))
		}
		return b
	}
	plain := best(plainLog())
	for name, s := range adversarialInputs() {
		if got := best(s); got > 50*plain {
			t.Errorf("%s: %v, more than 50 × %v (plain text)", name, got, plain)
		} else {
			t.Logf("%s: %v (plain %v, ×%.1f)", name, got, plain, float64(got)/float64(plain))
		}
	}
}

// A cancelled context stops the work.
func TestRedactStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New([]string{"s3cr3t"}).RedactContext(ctx, strings.Repeat("key=", 20000)); err == nil {
		t.Fatal("redaction went on after its context ended")
	}
}

// RedactParts finds a secret across parts (a multi-line value, line by
// line) and replaces its piece in each; other parts are as Redact leaves
// them.
func TestRedactPartsAcrossLines(t *testing.T) {
	key := "-----BEGIN KEY-----\nabcdefghijkl\n-----END KEY-----"
	r := New([]string{key})
	text := "before\n" + key + "\nafter sk-ant-abcdefghijklmnopqrstuvwxyz0123\n"
	var ends []int
	for i, c := range text {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	parts, err := r.RedactParts(context.Background(), text, ends)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"before\n", Redacted + "\n", Redacted + "\n", Redacted + "\n", r.Redact("after sk-ant-abcdefghijklmnopqrstuvwxyz0123\n")}
	if len(parts) != len(want) {
		t.Fatalf("%d parts: %q", len(parts), parts)
	}
	for i := range want {
		if parts[i] != want[i] {
			t.Fatalf("part %d is %q, want %q", i, parts[i], want[i])
		}
	}
	if strings.Contains(want[4], "abcdefghijklmnop") {
		t.Fatalf("the token was not redacted: %q", want[4])
	}
}

func TestSecretNamesAndURLPasswords(t *testing.T) {
	for _, k := range []string{"DB_PASS", "SSH_PASSPHRASE", "PASSWORD", "API_KEY", "GITHUB_TOKEN"} {
		if !SecretKey(k) {
			t.Errorf("%s is not taken for a secret's name", k)
		}
	}
	for v, want := range map[string]string{
		"postgres://app:s3cret@db:5432/x":       "s3cret",
		"https://user:p%40ss@example.test/path": "p%40ss",
		"redis://:onlypw@localhost":             "onlypw",
		"https://user@example.test":             "",
		"https://example.test/a:b@c":            "",
		"not a url: x@y":                        "",
	} {
		if got := URLPassword(v); got != want {
			t.Errorf("URLPassword(%q) = %q, want %q", v, got, want)
		}
	}
}
