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

	mu    sync.Mutex // End takes the hooks under it after closing done
	hooks []func()   // OnDone's, run once done is closed
}

// NewEnding returns an Ending that has not ended.
func NewEnding() *Ending { return &Ending{done: make(chan struct{})} }

// End records e and closes Done; it reports whether this call ended it
// (a later End changes nothing).
func (n *Ending) End(e Exit) (first bool) {
	n.once.Do(func() {
		n.exit = e
		close(n.done)
		n.mu.Lock()
		hooks := n.hooks
		n.hooks = nil
		n.mu.Unlock()
		for _, f := range hooks {
			go f()
		}
		first = true
	})
	return first
}

// OnDone runs f on a goroutine of its own once Done is closed (at once if
// it is): following a workload costs no goroutine while it runs.
func (n *Ending) OnDone(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.done:
		// End has taken the hooks, or will find none of f's: run it.
		go f()
	default:
		n.hooks = append(n.hooks, f)
	}
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
