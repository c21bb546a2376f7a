package field_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
)

// Each face names a field its own way, also through wrapping, and the
// error stays an ErrInvalid whose field can be read.
func TestRenderNamesTheFace(t *testing.T) {
	err := fmt.Errorf("create x: %w", field.Errorf(field.Env, "key %q is not a valid variable name", "1A"))
	for _, c := range []struct {
		names field.Names
		want  string
	}{
		{nil, `create x: invalid request: env key "1A" is not a valid variable name`},
		{field.Names{field.Env: "variables"}, `create x: invalid request: variables key "1A" is not a valid variable name`},
		{field.Names{field.CPU: "limits.cpu"}, `create x: invalid request: env key "1A" is not a valid variable name`},
	} {
		if got := c.names.Render(err); got != c.want {
			t.Errorf("Render with %v = %q, want %q", c.names, got, c.want)
		}
		w := c.names.Wrap(err)
		var fe *field.Error
		if w.Error() != c.want || !errors.Is(w, field.ErrInvalid) || !errors.As(w, &fe) || fe.Field != field.Env {
			t.Errorf("Wrap with %v = %q (%T)", c.names, w, w)
		}
	}
	once := field.Names{field.Env: "env"}.Wrap(err)
	if got := (field.Names{field.Env: "variables"}).Wrap(once).Error(); got != `create x: invalid request: env key "1A" is not a valid variable name` {
		t.Errorf("a name given once is renamed again: %q", got)
	}
	plain := errors.New("not a field")
	if got := (field.Names{field.Env: "x"}).Wrap(plain); got != plain {
		t.Errorf("Wrap of a plain error = %v", got)
	}
	if (field.Names{}).Render(nil) != "" || (field.Names{}).Wrap(nil) != nil {
		t.Error("nil error rendered as something")
	}
}
