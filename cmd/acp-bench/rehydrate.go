package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

func benchRehydrate(c config, d *daemon, r *results) error {
	// Keep c.rehydrate of the scale test's children, delete the rest.
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
	r.Rehydrate.N = c.rehydrate
	r.Rehydrate.InfoMs = float64(tInfo.Microseconds()) / 1000
	r.Rehydrate.AllAdoptedMs = float64(tAll.Microseconds()) / 1000
	resp, err := httpc.Get(d.url("/metrics"))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, `agent_control_plane_rehydrations_total{result="adopted"} `); ok {
				r.Rehydrate.AdoptedMetric, _ = strconv.Atoi(v)
			}
		}
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
