package main

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/client"
)

// feed is one SSE subscription that hands each event's receipt time to
// whoever expects it.
type feed struct {
	resp    *http.Response
	mu      sync.Mutex
	waiters map[string]chan time.Time // "type id" → receipt
	onEvent func(typ, id string, at time.Time)
}

func subscribe(url string) (*feed, error) {
	resp, err := (&http.Client{Transport: bearer{http.DefaultTransport}}).Get(url)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("events: %d", resp.StatusCode)
	}
	f := &feed{resp: resp, waiters: map[string]chan time.Time{}}
	go f.read()
	return f, nil
}

func (f *feed) close() { f.resp.Body.Close() }

func (f *feed) expect(typ, id string) <-chan time.Time {
	c := make(chan time.Time, 1)
	f.mu.Lock()
	f.waiters[typ+" "+id] = c
	f.mu.Unlock()
	return c
}

func (f *feed) read() {
	er := client.NewEventReader(f.resp.Body)
	for {
		ev, err := er.Next()
		if err != nil {
			return
		}
		if ev.Type == "sandboxes_replaced" {
			continue
		}
		at := time.Now()
		// The id is the first "id" inside "sandbox"; avoid a full decode
		// on the hot path.
		data := string(ev.Data)
		i := strings.Index(data, `"sandbox":{"id":"`)
		if i < 0 {
			continue
		}
		rest := data[i+len(`"sandbox":{"id":"`):]
		id := rest[:strings.IndexByte(rest, '"')]
		typ := ev.Type
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
}

func await(c <-chan time.Time) (time.Time, error) {
	select {
	case t := <-c:
		return t, nil
	case <-time.After(60 * time.Second):
		return time.Time{}, errors.New("event did not arrive")
	}
}
