package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
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

// benchReadyWithoutCgroups measures create → child answers again on a
// second daemon with cgroups off: the cost of containment.
func benchReadyWithoutCgroups(c config, d *daemon, r *results) error {
	var info struct {
		Cgroups struct {
			Mode string `json:"mode"`
		} `json:"cgroups"`
	}
	if err := getJSON(d.url("/v1/info"), &info); err != nil {
		return err
	}
	r.Ready.Cgroups = info.Cgroups.Mode
	root, err := os.MkdirTemp("", "acp-bench-nocg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	// Ports above the floor's, below the ephemeral range.
	off := &daemon{bin: d.bin, root: root, addr: "127.0.0.1:" + strconv.Itoa(d.portLo-2),
		portLo: d.portHi + 51, portHi: d.portHi + 99, env: []string{"AGENT_CONTROL_PLANE_CGROUPS=off"}}
	if err := off.start(); err != nil {
		return err
	}
	defer off.cleanup()
	var child []time.Duration
	for i := range c.runs {
		id := fmt.Sprintf("nocg%d", i)
		t0 := time.Now()
		sb, err := off.create(id, nil)
		if err != nil {
			return err
		}
		child = append(child, pollChild(prober, sb.Port).Sub(t0))
		off.delete(id)
	}
	r.Ready.ChildAnswersNoCgroups = summarize(child)
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
