package supervisor

import (
	"slices"
	"sync"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// perWorkload keeps what lives in one workload of each sandbox and no
// longer (terminals, interpreter contexts, language servers), counted
// for the bounds: a stop or a restart leaves them behind, ended by end
// on their own goroutine, and a delete forgets them.
type perWorkload[T comparable] struct {
	mu    sync.Mutex
	by    map[string][]inWorkload[T] // sandbox id → in the order added
	count int
	end   func(T)
	// ended, when set, reports one that has ended by itself: it is
	// forgotten too.
	ended func(T) bool
}

type inWorkload[T comparable] struct {
	v  T
	in runtime.Handle
}

// liveLocked forgets sandbox id's items of a workload other than h (nil:
// all of them) and, with ended, those that ended, and returns the rest.
func (p *perWorkload[T]) liveLocked(id string, h runtime.Handle) []T {
	var out []T
	keep := p.by[id][:0]
	for _, it := range p.by[id] {
		switch {
		case it.in != h || h == nil:
			go p.end(it.v)
		case p.ended != nil && p.ended(it.v):
		default:
			keep = append(keep, it)
			out = append(out, it.v)
			continue
		}
		p.count--
	}
	if len(keep) == 0 {
		delete(p.by, id)
	} else {
		p.by[id] = keep
	}
	return out
}

// addLocked counts v as sandbox id's, in workload h.
func (p *perWorkload[T]) addLocked(id string, v T, h runtime.Handle) {
	if p.by == nil {
		p.by = map[string][]inWorkload[T]{}
	}
	p.by[id] = append(p.by[id], inWorkload[T]{v, h})
	p.count++
}

// removeLocked forgets v (not ending it).
func (p *perWorkload[T]) removeLocked(id string, v T) {
	n := len(p.by[id])
	p.by[id] = slices.DeleteFunc(p.by[id], func(it inWorkload[T]) bool { return it.v == v })
	p.count -= n - len(p.by[id])
	if len(p.by[id]) == 0 {
		delete(p.by, id)
	}
}

// forget ends and forgets all of a deleted sandbox's.
func (p *perWorkload[T]) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.liveLocked(id, nil)
}

// closeAll ends and forgets every item, waiting for each to end: at the
// daemon's close, what only this daemon could reach goes with it.
func (p *perWorkload[T]) closeAll() {
	p.mu.Lock()
	var all []T
	for _, items := range p.by {
		for _, it := range items {
			all = append(all, it.v)
		}
	}
	p.by, p.count = nil, 0
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range all {
		wg.Go(func() { p.end(v) })
	}
	wg.Wait()
}
