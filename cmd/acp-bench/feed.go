package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// feed is one event subscription that hands each event's receipt time to
// whoever expects it. It follows the stream as any client should
// (client.Watch): a stream the daemon drops because its reader fell
// behind is resumed with Last-Event-ID, so nothing is missed.
type feed struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	waiters map[string]chan time.Time // "type id" → receipt
	onEvent func(typ, id string, at time.Time)
}

// subscribe follows the events of the daemon at base; it returns once the
// first snapshot has arrived.
func subscribe(base string) (*feed, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &feed{cancel: cancel, done: make(chan struct{}), waiters: map[string]chan time.Time{}}
	ready := make(chan struct{})
	var once sync.Once
	c := client.New(base, client.WithToken(benchToken))
	go func() {
		defer close(f.done)
		c.Watch(ctx, nil, func(ev wire.StreamEvent) error {
			at := time.Now()
			if ev.Type == wire.EventReplaced {
				once.Do(func() { close(ready) })
				// After a gap the daemon could not replay: what the
				// snapshot shows has happened.
				for _, sb := range ev.Sandboxes {
					f.deliver("sandbox."+sb.State, sb.ID, at)
				}
				return nil
			}
			if ev.Sandbox != nil {
				f.deliver(ev.Type, ev.Sandbox.ID, at)
			}
			return nil
		})
	}()
	select {
	case <-ready:
		return f, nil
	case <-time.After(30 * time.Second):
		f.close()
		return nil, errors.New("events: no snapshot within 30 s")
	}
}

func (f *feed) deliver(typ, id string, at time.Time) {
	f.mu.Lock()
	c := f.waiters[typ+" "+id]
	delete(f.waiters, typ+" "+id)
	on := f.onEvent
	f.mu.Unlock()
	if c != nil {
		c <- at
	}
	if on != nil {
		on(typ, id, at)
	}
}

func (f *feed) close() {
	f.cancel()
	<-f.done
}

func (f *feed) expect(typ, id string) <-chan time.Time {
	c := make(chan time.Time, 1)
	f.mu.Lock()
	f.waiters[typ+" "+id] = c
	f.mu.Unlock()
	return c
}

func await(c <-chan time.Time) (time.Time, error) {
	select {
	case t := <-c:
		return t, nil
	case <-time.After(60 * time.Second):
		return time.Time{}, errors.New("event did not arrive")
	}
}
