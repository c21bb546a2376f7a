package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/probe"
)

func benchReady(c config, d *daemon, r *results) error {
	var floor, answered, child, started []time.Duration
	for i := range c.runs {
		// The floor: the same stub, spawned directly and polled the same way.
		port := d.portHi + 1 + i%50
		cmd := exec.Command(d.bin, "stub-agent")
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "AGENT_SANDBOX_ID=floor")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return err
		}
		floor = append(floor, pollChild(prober, port).Sub(t0))
		cmd.Process.Kill()
		cmd.Wait()

		id := fmt.Sprintf("ready%d", i)
		ev := d.events.expect("sandbox.started", id)
		t0 = time.Now()
		sb, err := d.create(id, nil)
		if err != nil {
			return err
		}
		answered = append(answered, time.Since(t0))
		child = append(child, pollChild(prober, sb.Port).Sub(t0))
		at, err := await(ev)
		if err != nil {
			return err
		}
		started = append(started, at.Sub(t0))
		d.delete(id)
	}
	r.Ready.Floor, r.Ready.Answered = summarize(floor), summarize(answered)
	r.Ready.ChildAnswers, r.Ready.Started = summarize(child), summarize(started)
	return nil
}

// pollChild polls the stub's /api/info until it answers 2xx.
func pollChild(p *probe.HTTP, port int) time.Time {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/api/info"
	probe.Backoff{Initial: 100 * time.Microsecond}.Until(context.Background(), func(ctx context.Context) (bool, error) {
		return p.Ready(ctx, url), nil
	})
	return time.Now()
}

// prober is the bench's readiness probe: the daemon's own, at the bench's
// resolution.
var prober = probe.NewHTTP(time.Second)
