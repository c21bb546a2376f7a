package supervisor

import (
	"errors"
	"fmt"
	"testing"
)

// The state machine, walked whole: every pair of states is a move the
// table has, which move makes, or one it refuses with a *MoveError and
// leaves the sandbox as it was.
func TestStateMachine(t *testing.T) {
	all := []State{"", Starting, Started, Stopped, Destroyed}
	legal := map[string]bool{
		" → starting": true, "starting → started": true, "starting → stopped": true,
		"started → stopped": true, "stopped → starting": true, "stopped → destroyed": true,
	}
	for _, from := range all {
		for _, to := range all {
			if to == "" {
				continue
			}
			name := fmt.Sprintf("%s → %s", from, to)
			t.Run(name, func(t *testing.T) {
				sb := Sandbox{State: from}
				err := move(&sb, to)
				switch {
				case legal[name] && (err != nil || sb.State != to):
					t.Fatalf("a legal move: %v, now %s", err, sb.State)
				case !legal[name]:
					var me *MoveError
					if !errors.As(err, &me) || !errors.Is(err, ErrIllegalMove) || me.From != from || me.To != to || sb.State != from {
						t.Fatalf("an illegal move: %v, now %s", err, sb.State)
					}
				}
			})
		}
	}
	// The table has no state the walk does not know.
	for from, tos := range transitions {
		for _, to := range tos {
			if !legal[fmt.Sprintf("%s → %s", from, to)] {
				t.Errorf("the table has %s → %s, which this test does not", from, to)
			}
		}
	}
}

// The teardown table, walked whole: a stop or a delete begins from none
// and ends in none, a delete may begin again over itself, and every other
// move is refused with a *MoveError, leaving the teardown as it was.
func TestTeardownMoves(t *testing.T) {
	all := []Teardown{NoTeardown, TeardownStop, TeardownDelete}
	legal := map[[2]Teardown]bool{
		{NoTeardown, TeardownStop}: true, {NoTeardown, TeardownDelete}: true,
		{TeardownStop, NoTeardown}:   true,
		{TeardownDelete, NoTeardown}: true, {TeardownDelete, TeardownDelete}: true,
	}
	for _, from := range all {
		for _, to := range all {
			cur := from
			err := setTeardown(&cur, to)
			switch {
			case legal[[2]Teardown{from, to}] && (err != nil || cur != to):
				t.Errorf("%q → %q, legal: %v, now %q", from, to, err, cur)
			case !legal[[2]Teardown{from, to}] && (!errors.Is(err, ErrIllegalMove) || cur != from):
				t.Errorf("%q → %q, illegal: %v, now %q", from, to, err, cur)
			}
		}
	}
	for from, tos := range teardowns {
		for _, to := range tos {
			if !legal[[2]Teardown{from, to}] {
				t.Errorf("the table has %q → %q, which this test does not", from, to)
			}
		}
	}
}
