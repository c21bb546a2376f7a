package supervisor

import (
	"errors"
	"fmt"
	"slices"
)

// transitions is the sandbox state machine: the states each state may
// move to. Nothing else moves a sandbox: every change of State goes
// through move.
//
//	(new) → starting          a create
//	starting → started        it answered its readiness probe
//	starting → stopped        it exited, timed out or was stopped first
//	started → stopped         it exited, or was stopped
//	stopped → starting        a start again, in place
//	stopped → destroyed       a delete (a live sandbox is stopped first)
var transitions = map[State][]State{
	"":        {Starting},
	Starting:  {Started, Stopped},
	Started:   {Stopped},
	Stopped:   {Starting, Destroyed},
	Destroyed: nil,
}

// ErrIllegalMove is wrapped by the error of a move the state machine does
// not have.
var ErrIllegalMove = errors.New("illegal state change")

// MoveError is a move refused: the sandbox is in From, which has no move
// to To.
type MoveError struct{ From, To State }

func (e *MoveError) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(new)"
	}
	return fmt.Sprintf("%s: %s → %s", ErrIllegalMove, from, e.To)
}

func (e *MoveError) Unwrap() error { return ErrIllegalMove }

// CanMove reports whether the state machine moves from to to.
func CanMove(from, to State) bool { return slices.Contains(transitions[from], to) }

// move changes sb's state to to, or refuses with a *MoveError and leaves
// sb as it was.
func move(sb *Sandbox, to State) error {
	if !CanMove(sb.State, to) {
		return &MoveError{From: sb.State, To: to}
	}
	sb.State = to
	return nil
}

// Teardown is what is being done to a sandbox while a stop or a delete of
// it is under way: its State stays what it was until the stop is done.
// Get and ListPage show it (Sandbox.Teardown); it is never persisted.
type Teardown string

const (
	NoTeardown     Teardown = ""
	TeardownStop   Teardown = "stopping"
	TeardownDelete Teardown = "destroying"
)

// teardowns are its moves: a stop or a delete begins from none and ends
// in none (done, or failed); a delete stops its sandbox first and goes on
// being a delete until it is done, so it may begin again over itself,
// while a stop never replaces a delete.
var teardowns = map[Teardown][]Teardown{
	NoTeardown:     {TeardownStop, TeardownDelete},
	TeardownStop:   {NoTeardown},
	TeardownDelete: {NoTeardown, TeardownDelete},
}

// setTeardown moves *cur to to, or refuses with a *MoveError (its states
// the teardowns') and leaves it as it was.
func setTeardown(cur *Teardown, to Teardown) error {
	if !slices.Contains(teardowns[*cur], to) {
		return &MoveError{From: State(*cur), To: State(to)}
	}
	*cur = to
	return nil
}
