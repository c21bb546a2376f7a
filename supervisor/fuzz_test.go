package supervisor

import (
	"strings"
	"testing"
)

// The supervisor's own validation never panics and never accepts a name
// that could leave the root.
func FuzzValidateCreate(f *testing.F) {
	f.Add("ok-name", "KEY", "value", "label", "v")
	f.Add("..", "1A", "x\x00y", "", "")
	f.Fuzz(func(t *testing.T, name, envKey, envVal, labelKey, labelVal string) {
		req := CreateRequest{Name: name, Env: map[string]string{envKey: envVal}, Labels: map[string]string{labelKey: labelVal}}
		if req.Validate() != nil {
			return
		}
		if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || strings.HasPrefix(name, ".") {
			t.Fatalf("accepted name %q", name)
		}
		if strings.ContainsAny(envKey, "=\x00") || strings.IndexByte(envVal, 0) >= 0 {
			t.Fatalf("accepted env %q", envKey)
		}
	})
}
