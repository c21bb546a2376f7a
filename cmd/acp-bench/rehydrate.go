package main

import (
	"fmt"
	"sync"
	"time"
)

// benchRehydrate keeps c.rehydrate of each daemon's scale sandboxes,
// SIGKILLs the daemon and times its restart until every child is
// re-adopted.
func benchRehydrate(c config, b *bench, r *results) error {
	return b.eachArm(r, func(d *daemon, a *arm) error { return rehydrate(c, d, a) })
}

func rehydrate(c config, d *daemon, a *arm) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := c.rehydrate; i < c.scale; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.delete(fmt.Sprintf("scale%03d", i))
		})
	}
	wg.Wait()
	d.kill()
	t0 := time.Now()
	if err := d.spawn(60 * time.Second); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	tInfo := time.Since(t0)
	var started int
	if err := waitFor(60*time.Second, func() bool {
		list, err := d.list()
		started = 0
		for _, sb := range list {
			if sb.State == "started" {
				started++
			}
		}
		return err == nil && started == c.rehydrate
	}); err != nil {
		return fmt.Errorf("%d of %d re-adopted", started, c.rehydrate)
	}
	tAll := time.Since(t0)
	a.Rehydrate.N = c.rehydrate
	a.Rehydrate.InfoMs, a.Rehydrate.AllAdoptedMs = ms(tInfo), ms(tAll)
	if m, err := d.metrics(); err == nil {
		a.Rehydrate.AdoptedMetric = int(m[`agent_control_plane_rehydrations_total{result="adopted"}`])
	}
	if err := d.subscribe(); err != nil {
		return err
	}
	// Clean up for the next test.
	for i := range c.rehydrate {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.delete(fmt.Sprintf("scale%03d", i))
		})
	}
	wg.Wait()
	return nil
}
