package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// benchEvents opens many subscribers and, while creates run, times how
// long after a kill -9 each subscriber holds the sandbox.stopped event.
func benchEvents(c config, d *daemon, r *results) error {
	subs := make([]*subscriberLog, c.subscribers)
	feeds := make([]*feed, c.subscribers)
	for i := range subs {
		f, err := subscribe("http://" + d.addr)
		if err != nil {
			return err
		}
		s := &subscriberLog{at: map[string]time.Time{}}
		f.onEvent = func(typ, id string, at time.Time) {
			if typ == "sandbox.stopped" {
				s.mu.Lock()
				s.at[id] = at
				s.mu.Unlock()
			}
		}
		subs[i], feeds[i] = s, f
	}
	defer func() {
		for _, f := range feeds {
			f.close()
		}
	}()
	quiet, missedQuiet, err := measureDelivery(c, d, subs, "quiet", nil)
	if err != nil {
		return err
	}
	// Background creates and deletes for the whole measurement.
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("load%d", i%20)
			d.create(id, nil)
			d.delete(id)
		}
	})
	busy, missed, err := measureDelivery(c, d, subs, "ev", cancel)
	cancel()
	bg.Wait()
	if err != nil {
		return err
	}
	r.Events.Subscribers = c.subscribers
	r.Events.Delivery = summarize(busy)
	r.Events.Quiet = summarize(quiet)
	r.Events.Missed = missed + missedQuiet
	return nil
}

type subscriberLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

// measureDelivery kills c.runs fresh sandboxes one at a time and returns,
// for each subscriber and kill, how long after the kill it held the
// sandbox.stopped event.
func measureDelivery(c config, d *daemon, subs []*subscriberLog, prefix string, onErr func()) ([]time.Duration, int, error) {
	var lat []time.Duration
	missed := 0
	for i := range c.runs {
		id := fmt.Sprintf("%s%d", prefix, i)
		if err := createStarted(d, id, nil); err != nil {
			return nil, 0, err
		}
		pid := d.pid(id)
		ev := d.events.expect("sandbox.stopped", id)
		t0 := time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
		if _, err := await(ev); err != nil {
			return nil, 0, err
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, s := range subs {
			for {
				s.mu.Lock()
				at, ok := s.at[id]
				s.mu.Unlock()
				if ok {
					lat = append(lat, at.Sub(t0))
					break
				}
				if time.Now().After(deadline) {
					missed++
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		d.delete(id)
	}
	return lat, missed, nil
}
