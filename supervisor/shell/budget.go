package shell

import (
	"container/list"
	"sync"
)

// Budget bounds the output that sessions keep, together (a per-sandbox
// count of sessions does not bound all of them). Each command's output
// is counted as it comes; past the budget, the output of the finished
// command that ended longest ago is dropped, in whichever session it is
// (its logs then say they were cut), until the rest fits. A running
// command's output is counted but never dropped: MaxOutput bounds it.
type Budget struct {
	max  int64
	mu   sync.Mutex
	used int64
	kept list.List // finished commands holding output, oldest first
}

// NewBudget is a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Used is what the commands hold now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// add counts delta more bytes held, then drops what must go.
func (b *Budget) add(delta int64) {
	if b == nil || delta == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += delta
	b.evictLocked()
}

// keep adds a finished command to those whose output may be dropped.
func (b *Budget) keep(c *Command) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c.mu.Lock()
	released := c.released
	c.mu.Unlock()
	if c.elem == nil && !released {
		c.elem = b.kept.PushBack(c)
	}
	b.evictLocked()
}

// release forgets a command (its session forgot it or ended): what it
// holds no longer counts, and is freed with the last reference to it
// (an answer being written may still read it).
func (b *Budget) release(c *Command) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.elem != nil {
		b.kept.Remove(c.elem)
		c.elem = nil
	}
	c.mu.Lock()
	c.released = true
	b.used -= c.held
	c.held = 0
	c.mu.Unlock()
}

func (b *Budget) evictLocked() {
	for b.used > b.max && b.kept.Len() > 0 {
		c := b.kept.Remove(b.kept.Front()).(*Command)
		c.elem = nil
		b.used -= c.drop()
	}
}
