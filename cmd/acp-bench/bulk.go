package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// benchBulk starts c.bulk stubs at once and times them until every one
// answers, then stops them all at once and times that until every stop
// is done: directly (the floor: this program spawns each, polls it the
// same way, then SIGTERMs each and reaps it) and through each daemon
// (concurrent creates, then concurrent stops). Each round runs the three
// in random order; the figures are the medians over rounds.
func benchBulk(c config, b *bench, r *results) error {
	var floorUp, floorDown []float64
	up, down := map[*arm][]float64{}, map[*arm][]float64{}
	steps := map[*arm]map[string]float64{}
	for range c.bulkRounds {
		order := []int{0, 1, 2}
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			if k == 2 {
				u, d, err := b.bulkFloor(c.bulk)
				if err != nil {
					return err
				}
				floorUp, floorDown = append(floorUp, u), append(floorDown, d)
				continue
			}
			x := b.arms(r)[k]
			before, err := x.d.metrics()
			if err != nil {
				return err
			}
			u, d, err := bulkDaemon(x.d, c.bulk)
			if err != nil {
				return err
			}
			after, err := x.d.metrics()
			if err != nil {
				return err
			}
			if steps[x.a] == nil {
				steps[x.a] = map[string]float64{}
			}
			for step, ms := range stepsBetween(before, after) {
				steps[x.a][step] += ms / float64(c.bulkRounds)
			}
			up[x.a], down[x.a] = append(up[x.a], u), append(down[x.a], d)
		}
	}
	r.Floor.BulkMs, r.Floor.StopMs = median(floorUp), median(floorDown)
	for a := range up {
		a.BulkMs, a.StopMs, a.BulkSteps = median(up[a]), median(down[a]), steps[a]
	}
	return nil
}

// bulkFloor is one round of the floor, in ms: n stubs spawned at once
// until all answer, then SIGTERMed at once until all are reaped.
func (b *bench) bulkFloor(n int) (up, down float64, err error) {
	cmds := make([]*exec.Cmd, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	t0 := time.Now()
	for i := range n {
		wg.Go(func() {
			port := b.floorPort + i
			cmd := b.floorCmd(port)
			if e := cmd.Start(); e != nil {
				mu.Lock()
				err = e
				mu.Unlock()
				return
			}
			cmds[i] = cmd
			pollChild(prober, port)
		})
	}
	wg.Wait()
	up = ms(time.Since(t0))
	t0 = time.Now()
	for _, cmd := range cmds {
		if cmd != nil {
			wg.Go(func() {
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
			})
		}
	}
	wg.Wait()
	return up, ms(time.Since(t0)), err
}

// bulkDaemon is one round through d, in ms: n concurrent creates until
// every child answers, then n concurrent stops until every one returns.
// The sandboxes are deleted after, untimed.
func bulkDaemon(d *daemon, n int) (up, down float64, err error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	fail := func(e error) {
		mu.Lock()
		err = e
		mu.Unlock()
	}
	t0 := time.Now()
	for i := range n {
		wg.Go(func() {
			sb, e := d.create(fmt.Sprintf("bulk%d", i), nil)
			if e != nil {
				fail(e)
				return
			}
			pollChild(prober, sb.Port)
		})
	}
	wg.Wait()
	up = ms(time.Since(t0))
	t0 = time.Now()
	for i := range n {
		wg.Go(func() {
			if e := post(d.url(fmt.Sprintf("/v1/sandboxes/bulk%d/stop", i)), "", nil, http.StatusOK); e != nil {
				fail(e)
			}
		})
	}
	wg.Wait()
	down = ms(time.Since(t0))
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.delete(fmt.Sprintf("bulk%d", i))
		})
	}
	wg.Wait()
	return up, down, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
