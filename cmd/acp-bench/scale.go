package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// benchScale creates 500 sandboxes on each daemon, then up to c.scale,
// and reads the daemon's memory at each mark once all have started.
func benchScale(c config, b *bench, r *results) error {
	return b.eachArm(r, func(d *daemon, a *arm) error { return scale(c, d, a) })
}

// settle is how long after a burst its memory is read again: once the
// burst is over, the daemon returns what it spent to the OS.
const settle = supervisor.QuietAfter + time.Second

func scale(c config, d *daemon, a *arm) error {
	pid := d.cmd.Process.Pid
	rss0 := status(pid, "VmRSS")
	mark := min(500, c.scale)
	t0 := time.Now()
	var at time.Time
	from := 0
	for _, upTo := range []int{mark, c.scale} {
		if upTo == from {
			continue
		}
		var err error
		if at, err = createMany(d, "scale", from, upTo); err != nil {
			return err
		}
		from = upTo
		if upTo == mark {
			a.Scale.RSSAt500MiB = float64(status(pid, "VmRSS")) / 1024
			time.Sleep(settle)
			a.Scale.RSSAt500SettledMiB = float64(status(pid, "VmRSS")) / 1024
		}
	}
	a.Scale.N = c.scale
	a.Scale.AllStartedMs = ms(at.Sub(t0))
	list, err := d.list()
	if err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, sb := range list {
		if seen[sb.Port] {
			a.Scale.PortCollisions++
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
	a.Scale.List = summarize(lat)
	rssN := status(pid, "VmRSS")
	a.Scale.RSSIdleMiB = float64(rss0) / 1024
	a.Scale.RSSAtNMiB = float64(rssN) / 1024
	a.Scale.PerSandboxKiB = float64(rssN-rss0) / float64(c.scale)
	m, err := d.metrics()
	if err != nil {
		return err
	}
	a.Scale.Goroutines = int(m["go_goroutines"])
	a.Scale.HeapInuseMiB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
	a.Scale.StackInuseMiB = m["go_memstats_stack_inuse_bytes"] / (1 << 20)
	a.Scale.DaemonThreadsAt = status(pid, "Threads")
	return nil
}

// createMany creates prefix<from>…prefix<to-1> on d, 64 at a time, and
// returns when the last has started.
func createMany(d *daemon, prefix string, from, to int) (time.Time, error) {
	var mu sync.Mutex
	remaining := to - from
	all := make(chan time.Time, 1)
	d.events.mu.Lock()
	d.events.onEvent = func(typ, id string, at time.Time) {
		if typ != "sandbox.started" || !strings.HasPrefix(id, prefix) {
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
	defer func() {
		d.events.mu.Lock()
		d.events.onEvent = nil
		d.events.mu.Unlock()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	sem := make(chan struct{}, 64)
	for i := from; i < to; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := d.create(fmt.Sprintf("%s%03d", prefix, i), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return time.Time{}, err
	}
	at, err := await(all)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		return time.Time{}, fmt.Errorf("not all started: %d left", remaining)
	}
	return at, nil
}
