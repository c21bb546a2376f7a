package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"
)

func benchScale(c config, d *daemon, r *results) error {
	pid := d.cmd.Process.Pid
	runtime.GC()
	rss0 := status(pid, "VmRSS")
	var mu sync.Mutex
	remaining := c.scale
	all := make(chan time.Time, 1)
	d.events.mu.Lock()
	d.events.onEvent = func(typ, id string, at time.Time) {
		if typ != "sandbox.started" || !strings.HasPrefix(id, "scale") {
			return
		}
		mu.Lock()
		remaining--
		if remaining == 0 {
			all <- at
		}
		mu.Unlock()
	}
	d.events.mu.Unlock()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.scale)
	sem := make(chan struct{}, 64)
	for i := range c.scale {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := d.create(fmt.Sprintf("scale%03d", i), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	at, err := await(all)
	if err != nil {
		return fmt.Errorf("not all started: %d left", remaining)
	}
	r.Scale.N = c.scale
	r.Scale.AllStartedMs = float64(at.Sub(t0).Microseconds()) / 1000
	list, err := d.list()
	if err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, sb := range list {
		if seen[sb.Port] {
			r.Scale.PortCollisions++
		}
		seen[sb.Port] = true
	}
	// The daemon's latency: until the whole answer has arrived, without
	// the time this program would take to decode it.
	var lat []time.Duration
	for range 200 {
		t := time.Now()
		resp, err := httpc.Get(d.url("/v1/sandboxes"))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t))
	}
	r.Scale.List = summarize(lat)
	rssN := status(pid, "VmRSS")
	r.Scale.RSSIdleMiB = float64(rss0) / 1024
	r.Scale.RSSAtNMiB = float64(rssN) / 1024
	r.Scale.PerSandboxKiB = float64(rssN-rss0) / float64(c.scale)
	r.Scale.Goroutines = d.goroutines()
	r.Scale.DaemonThreadsAt = status(pid, "Threads")
	d.events.mu.Lock()
	d.events.onEvent = nil
	d.events.mu.Unlock()
	return nil
}
