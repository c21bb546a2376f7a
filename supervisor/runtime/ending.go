package runtime

import (
	"context"
	"sync"
)

// Ending is how a workload or a command ends, for the runtimes to embed:
// Done is closed once, by the first End, and Exit says how it ended from
// then on (Unknown before). The zero value is not ready: use NewEnding.
type Ending struct {
	once sync.Once
	done chan struct{}
	exit Exit
}

// NewEnding returns an Ending that has not ended.
func NewEnding() *Ending { return &Ending{done: make(chan struct{})} }

// End records e and closes Done; it reports whether this call ended it
// (a later End changes nothing).
func (n *Ending) End(e Exit) (first bool) {
	n.once.Do(func() {
		n.exit = e
		close(n.done)
		first = true
	})
	return first
}

// Done is closed once it has ended.
func (n *Ending) Done() <-chan struct{} { return n.done }

// Exit is how it ended, or an unknown exit before it has.
func (n *Ending) Exit() Exit {
	select {
	case <-n.done:
		return n.exit
	default:
		return Exit{Unknown: true}
	}
}

// Wait returns how it ended once it has, or ctx's error first.
func (n *Ending) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-n.done:
		return n.exit, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}
