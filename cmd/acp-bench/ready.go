package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// benchReady times, one at a time, a create until its child answers, on
// both daemons, beside the floor: the same stub spawned directly and
// polled the same way. Each round runs the three in random order. Each
// create's steps are read from the daemon's metrics around it.
//
// It is long because its rounds interleave the floor and both daemons in
// random order, and each round reads its three timings together.
func benchReady(c config, b *bench, r *results) error {
	var floor []time.Duration
	var floorChild []proc.SchedStat
	type series struct {
		answered, child, started, spawnToAnswer, cpu []time.Duration
		sched                                        []proc.SchedStat
	}
	got := map[*arm]*series{}
	steps := map[*arm]map[string][]float64{}
	arms := b.allArms(r)
	for _, x := range arms {
		got[x.a], steps[x.a] = &series{}, map[string][]float64{}
	}
	for i := range c.runs {
		order := rand.Perm(len(arms) + 1) // the last is the floor
		for _, k := range order {
			if k == len(arms) {
				d, st, err := b.spawnFloor(b.floorPort + i%50)
				if err != nil {
					return err
				}
				floor, floorChild = append(floor, d), append(floorChild, st)
				continue
			}
			x := arms[k]
			before, err := x.d.metrics()
			if err != nil {
				return err
			}
			id := fmt.Sprintf("ready%d", i)
			ev := x.d.events.expect("sandbox.started", id)
			pid := x.d.cmd.Process.Pid
			daemon0, err := proc.Sched(pid)
			if err != nil {
				return err
			}
			t0 := time.Now()
			sb, err := x.d.create(id, nil)
			if err != nil {
				return err
			}
			answered := time.Since(t0)
			child := pollChild(prober, sb.Port).Sub(t0)
			daemon1, err := proc.Sched(pid)
			if err != nil {
				return err
			}
			childSt, err := proc.Sched(x.d.pid(id))
			if err != nil {
				return fmt.Errorf("%s: the child's schedstat: %w", id, err)
			}
			at, err := await(ev)
			if err != nil {
				return err
			}
			after, err := x.d.metrics()
			if err != nil {
				return err
			}
			took := stepsBetween(before, after)
			beforeSpawn := 0.0 // the steps up to the spawn's end, in ms
			spawned := false
			for _, step := range supervisor.CreateSteps {
				steps[x.a][step] = append(steps[x.a][step], took[step])
				if !spawned {
					beforeSpawn += took[step]
				}
				spawned = spawned || step == runtime.StepSpawn
			}
			s := got[x.a]
			s.answered = append(s.answered, answered)
			s.child = append(s.child, child)
			s.started = append(s.started, at.Sub(t0))
			s.cpu = append(s.cpu, daemon1.Ran-daemon0.Ran)
			s.sched = append(s.sched, childSt)
			s.spawnToAnswer = append(s.spawnToAnswer, answered-time.Duration(beforeSpawn*float64(time.Millisecond)))
			x.d.delete(id)
		}
	}
	r.Floor.Ready, r.Floor.ReadyChild = summarize(floor), summarizeSched(floorChild)
	for a, s := range got {
		a.Answered, a.ChildAnswers = summarize(s.answered), summarize(s.child)
		a.Started, a.SpawnToAnswer = summarize(s.started), summarize(s.spawnToAnswer)
		a.DaemonCPU, a.Child = summarize(s.cpu), summarizeSched(s.sched)
		a.Steps = map[string]float64{}
		for step, v := range steps[a] {
			slices.Sort(v)
			a.Steps[step] = v[len(v)/2]
		}
	}
	return nil
}

// spawnFloor spawns the stub directly on port, times it until it
// answers, reads its scheduler counts then, and kills it.
func (b *bench) spawnFloor(port int) (time.Duration, proc.SchedStat, error) {
	cmd := b.floorCmd(port)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, proc.SchedStat{}, err
	}
	d := pollChild(prober, port).Sub(t0)
	st, err := proc.Sched(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	return d, st, err
}

// floorCmd is the stub as the floors run it: detached, as the daemon's
// children are.
func (b *bench) floorCmd(port int) *exec.Cmd {
	cmd := exec.Command(b.on.bin, "stub-agent")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "AGENT_SANDBOX_ID=floor")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
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
