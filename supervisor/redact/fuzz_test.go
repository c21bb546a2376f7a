package redact

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// Whatever the text, a secret never survives redaction, in any of its
// forms, and valid UTF-8 stays valid.
func FuzzRedact(f *testing.F) {
	f.Add("hunter2hunter2", "log: ", " end")
	f.Add(`pa"ss\word`, `{"v":"`, `"}`)
	f.Add(`endswith\`, "x ", "")
	f.Add("clé-secrète", "é", "ü")
	f.Fuzz(func(t *testing.T, secret, before, after string) {
		if len(secret) < minSecretLen || !utf8.ValidString(secret) {
			return
		}
		// A secret sharing characters with the placeholder could be
		// re-formed from it; such a secret is a test artefact.
		if strings.ContainsAny(strings.ToUpper(secret), "[]REDACT") {
			return
		}
		once, _ := json.Marshal(secret)
		twice, _ := json.Marshal(string(once))
		r := New([]string{secret})
		for _, form := range []string{secret, string(once[1 : len(once)-1]), string(twice[1 : len(twice)-1])} {
			text := before + form + after + form
			out := r.Redact(text)
			if strings.Contains(out, secret) {
				t.Fatalf("Redact(%q) = %q keeps the secret", text, out)
			}
			if utf8.ValidString(text) && !utf8.ValidString(out) {
				t.Fatalf("Redact(%q) = %q is not valid UTF-8", text, out)
			}
		}
	})
}
