package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// benchBulk starts c.bulk stubs at once, first directly (the floor: every
// process spawned by the bench and polled until it answers), then through
// concurrent creates, and times each until every child answers.
func benchBulk(c config, d *daemon, r *results) error {
	n := c.bulk
	floorPorts := make([]int, n)
	for i := range floorPorts {
		floorPorts[i] = d.portHi + 1 + i
	}
	cmds := make([]*exec.Cmd, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, port := range floorPorts {
		wg.Go(func() {
			cmd := exec.Command(d.bin, "stub-agent")
			cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "AGENT_SANDBOX_ID=floor")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			cmds[i] = cmd
			pollChild(prober, port)
		})
	}
	wg.Wait()
	floor := time.Since(t0)
	for _, cmd := range cmds {
		if cmd != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	if firstErr != nil {
		return firstErr
	}

	t0 = time.Now()
	for i := range n {
		wg.Go(func() {
			sb, err := d.create(fmt.Sprintf("bulk%d", i), nil)
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			pollChild(prober, sb.Port)
		})
	}
	wg.Wait()
	ours := time.Since(t0)
	for i := range n {
		wg.Go(func() { d.delete(fmt.Sprintf("bulk%d", i)) })
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	r.Bulk.N = n
	r.Bulk.FloorMs = float64(floor.Microseconds()) / 1000
	r.Bulk.AllAnsweredMs = float64(ours.Microseconds()) / 1000
	return nil
}
