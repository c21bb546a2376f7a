package supervisor

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Get returns one sandbox by id or name, without usage (Meter adds it).
// Reads and events agree: a workload that has exited shows as stopped
// once its exit is committed (record written, port released, event
// published), never before.
func (s *Supervisor) Get(id string) (Sandbox, error) {
	s.mu.Lock()
	e, ok := s.sandboxes[id]
	if !ok || e.pending {
		s.mu.Unlock()
		return Sandbox{}, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	}
	sb := e.viewLocked()
	s.mu.Unlock()
	return sb, nil
}

// UsageTimeout bounds how long one metering waits on a runtime (an engine
// asked over a socket): a sandbox whose usage does not come in time is
// shown without it.
const UsageTimeout = 2 * time.Second

// maxMeters is how many usage reads run at once.
const maxMeters = 8

// Meter fills the Usage of each live sandbox in sbs whose runtime can say
// what it consumes, reading a few at once, and returns when all have
// answered, ctx has ended or UsageTimeout has passed: a sandbox whose
// usage did not come is left without. It never holds the supervisor's
// lock while a runtime is asked.
func (s *Supervisor) Meter(ctx context.Context, sbs []Sandbox) {
	meters := make([]runtime.Meter, len(sbs))
	s.mu.Lock()
	for i, sb := range sbs {
		if e, ok := s.sandboxes[sb.ID]; ok && sb.State.Live() && e.handle != nil {
			meters[i], _ = e.handle.(runtime.Meter)
		}
	}
	s.mu.Unlock()
	usage := meterAll(ctx, meters)
	for i := range sbs {
		sbs[i].Usage = usage[i]
	}
}

// meterAll asks each non-nil meter for its usage, maxMeters at once, and
// returns what came within ctx and UsageTimeout (nil for the rest).
func meterAll(ctx context.Context, meters []runtime.Meter) []*runtime.Usage {
	ctx, cancel := context.WithTimeout(ctx, UsageTimeout)
	defer cancel()
	out := make([]*runtime.Usage, len(meters))
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		slots = make(chan struct{}, maxMeters)
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, m := range meters {
			if m == nil {
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-slots }()
				if u, err := m.Usage(ctx); err == nil {
					mu.Lock()
					out[i] = &u
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// A meter that ignores its ctx is left to finish on its own.
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]*runtime.Usage(nil), out...)
}

// List returns the sandboxes whose labels match f, oldest first.
func (s *Supervisor) List(f Filter) []Sandbox {
	page, _ := s.ListPage(ListOptions{Labels: f})
	return page
}

func (s *Supervisor) listLocked(f Filter) []Sandbox {
	page, _ := s.listPageLocked(ListOptions{Labels: f})
	return page
}

// Cursor is a position in the list order (creation time, then id).
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// CursorOf is the cursor that lists what comes after sb.
func CursorOf(sb Sandbox) Cursor { return Cursor{CreatedAt: sb.CreatedAt, ID: sb.ID} }

// String is the cursor as clients see it, opaque to them: base64url of
// "<createdAt unix ms>:<id>".
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMilli(), 10) + ":" + c.ID))
}

// ParseCursor reads a cursor that String gave out.
func ParseCursor(v string) (Cursor, error) {
	bad := invalid("cursor is not one this daemon gave out")
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return Cursor{}, bad
	}
	ms, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !validName(id) {
		return Cursor{}, bad
	}
	return Cursor{CreatedAt: time.UnixMilli(n).UTC(), ID: id}, nil
}

func (c Cursor) before(k listKey) bool { return listKey{at: c.CreatedAt, id: c.ID}.less(k) }

// ListOptions choose a page of the list.
type ListOptions struct {
	Labels Filter
	States []State // any of these; empty: every state
	After  *Cursor // only sandboxes after this position; nil: from the start
	Limit  int     // at most this many; 0 or less: all
}

// ListPage returns the sandboxes that match o in list order (oldest first,
// then by id), at most o.Limit of them, and whether more follow. Walking
// pages with After set to the last one returned sees every sandbox that
// exists throughout the walk exactly once, whatever is created or deleted
// meanwhile. It holds at most Limit sandboxes, whatever the registry's
// size.
func (s *Supervisor) ListPage(o ListOptions) (page []Sandbox, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listPageLocked(o)
}

func (s *Supervisor) listPageLocked(o ListOptions) (page []Sandbox, more bool) {
	limit := o.Limit
	if limit <= 0 {
		limit = math.MaxInt
	}
	// Candidates are small (position and entry); the limit+1 first are
	// kept in a max-heap by position, and only the page's are copied out.
	h := &pageHeap{}
	for _, e := range s.sandboxes {
		if e.pending || !o.Labels.Match(e.info.Labels) {
			continue
		}
		if len(o.States) > 0 && !slices.Contains(o.States, e.info.State) {
			continue
		}
		c := listKey{e.info.CreatedAt, e.id, e}
		if o.After != nil && !o.After.before(c) {
			continue
		}
		switch {
		case limit == math.MaxInt:
			*h = append(*h, c) // all of them: sorted once below
		case len(*h) <= limit:
			h.push(c)
		case c.less((*h)[0]):
			h.replaceTop(c)
		}
	}
	keys := []listKey(*h)
	slices.SortFunc(keys, func(a, b listKey) int { return a.compare(b) })
	if more = len(keys) > limit; more {
		keys = keys[:limit]
	}
	page = make([]Sandbox, len(keys))
	for i, k := range keys {
		page[i] = k.e.viewLocked()
	}
	return page, more
}

// listKey is a sandbox's position in the list order.
type listKey struct {
	at time.Time
	id string
	e  *sandbox
}

func (a listKey) compare(b listKey) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func (a listKey) less(b listKey) bool { return a.compare(b) < 0 }

// pageHeap is a max-heap of list positions (typed, so that no key is
// boxed into an interface on its way in).
type pageHeap []listKey

func (h *pageHeap) push(k listKey) {
	*h = append(*h, k)
	for i := len(*h) - 1; i > 0; {
		p := (i - 1) / 2
		if !(*h)[p].less((*h)[i]) {
			break
		}
		(*h)[p], (*h)[i] = (*h)[i], (*h)[p]
		i = p
	}
}

// replaceTop puts k in place of the largest key and restores the order.
func (h pageHeap) replaceTop(k listKey) {
	h[0] = k
	for i := 0; ; {
		l, r, big := 2*i+1, 2*i+2, i
		if l < len(h) && h[big].less(h[l]) {
			big = l
		}
		if r < len(h) && h[big].less(h[r]) {
			big = r
		}
		if big == i {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

func (s *Supervisor) lookup(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sandboxes[id]
	if !ok || e.pending {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	}
	return e, nil
}
