package redact

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// Redacting a 64 KiB log tail with a dozen secrets, the work behind one
// entrypoint-logs request.
func BenchmarkRedact(b *testing.B) {
	var secrets []string
	for i := range 12 {
		secrets = append(secrets, fmt.Sprintf("secret-value-%02d-abcdefgh", i))
	}
	r := New(secrets)
	var sb strings.Builder
	for i := 0; sb.Len() < 64<<10; i++ {
		fmt.Fprintf(&sb, "line %d: request ok, token=%s, user=alice\n", i, secrets[i%len(secrets)])
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		r.Redact(text)
	}
}

// Redacting 64 KiB of plain log and of each adversarial input: every one
// costs about the same per byte.
func BenchmarkRedactAdversarial(b *testing.B) {
	r := New([]string{"s3cr3t-value-123", `pa"ss\word`})
	inputs := adversarialInputs()
	inputs["plain log"] = plainLog()
	names := slices.Sorted(maps.Keys(inputs))
	for _, name := range names {
		text := inputs[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				r.Redact(text)
			}
		})
	}
}

// Publishing one event to 100 subscribers until every one has it: the
