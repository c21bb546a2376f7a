// Package field is how the core says which part of a request is wrong
// without speaking any API's words: an *Error names the field by the
// core's name for it (one of the constants below) and says why; each
// face renders it with its own field names (field.Names).
package field

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is what every *Error is: check with errors.Is.
var ErrInvalid = errors.New("invalid request")

// The core's names of the fields it checks.
const (
	Name       = "name"
	Labels     = "labels"
	Env        = "env"
	Snapshot   = "snapshot"
	AutoStop   = "autoStop"
	AutoDelete = "autoDelete"
	CPU        = "cpu"
	Memory     = "memory"
	Pids       = "pids"
	Extension  = "extension"
	Argv       = "argv"
	Timeout    = "timeout"
	Volumes    = "volumes"
	// NetworkAllowList is the network policy's allow list (Daytona's
	// networkAllowList).
	NetworkAllowList = "networkAllowList"
)

// Error is one field at fault and why. Reason reads after the field's
// name ("cpu must be ..." is Field "cpu", Reason "must be ...").
type Error struct {
	Field  string
	Reason string
}

// Errorf is an *Error for field f.
func Errorf(f, format string, args ...any) error {
	return &Error{Field: f, Reason: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return ErrInvalid.Error() + ": " + e.Field + " " + e.Reason }

// Unwrap makes every *Error an ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Names maps the core's field names to a face's; a name it lacks is
// shown as the core's.
type Names map[string]string

// Render is err's message with the field named as the face names it
// (also when the *Error is wrapped), or err's own message when it holds
// no *Error or was named already (Wrap).
func (n Names) Render(err error) string {
	if err == nil {
		return ""
	}
	var fe *Error
	var done *renamed
	if !errors.As(err, &fe) || errors.As(err, &done) {
		return err.Error()
	}
	name, ok := n[fe.Field]
	if !ok {
		return err.Error()
	}
	return strings.Replace(err.Error(), fe.Error(), ErrInvalid.Error()+": "+name+" "+fe.Reason, 1)
}

// Wrap is err named as Render names it, for good: a later Render or Wrap
// (the host's, with its face's names) leaves it as it is. errors.Is and
// errors.As see through it to err. An err that holds no *Error is
// returned as it is.
func (n Names) Wrap(err error) error {
	var fe *Error
	var done *renamed
	if !errors.As(err, &fe) || errors.As(err, &done) {
		return err
	}
	return &renamed{msg: n.Render(err), err: err}
}

type renamed struct {
	msg string
	err error
}

func (r *renamed) Error() string { return r.msg }
func (r *renamed) Unwrap() error { return r.err }
