package supervisor

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipStartKeepsCharacters(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	for n := 0; n <= 21; n++ {
		out := clipStart(s, n)
		if !utf8.ValidString(out) || len(out) > n {
			t.Fatalf("clipStart(%d) = %q", n, out)
		}
	}
}
