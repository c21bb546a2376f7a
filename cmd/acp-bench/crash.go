package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// crashOnce kills the child of a started sandbox and times the stopped
// event.
func crashOnce(d *daemon, id string) (time.Duration, error) {
	pid := d.pid(id)
	if pid <= 0 {
		return 0, fmt.Errorf("%s: no pid", id)
	}
	ev := d.events.expect("sandbox.stopped", id)
	t0 := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	at, err := await(ev)
	if err != nil {
		return 0, fmt.Errorf("%s: sandbox.stopped after SIGKILL of %d: %w", id, pid, err)
	}
	return at.Sub(t0), nil
}

// crashFloor spawns the stub directly, waits until it answers, kills it
// and times its wait (killFloor).
func (b *bench) crashFloor(port int) (time.Duration, error) {
	cmd := b.floorCmd(port)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pollChild(prober, port)
	return killFloor(cmd), nil
}

// killFloor kills a stub this program spawned and times its wait (a
// pidfd wait, as the daemon's).
func killFloor(cmd *exec.Cmd) time.Duration {
	t0 := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return time.Since(t0)
}

// agedFloor spawns n stubs directly, from port up, and waits until each
// answers: the re-adopted case's floor, killed one a round, as old and
// as idle as the re-adopted children when each is killed, and among as
// many (an idle stub takes longer to die than one that has just
// answered: 1.80 against 1.43 ms for 40 alone here). The caller kills
// what is left.
func (b *bench) agedFloor(port, n int) ([]*exec.Cmd, error) {
	var cmds []*exec.Cmd
	for i := range n {
		cmd := b.floorCmd(port + i)
		if err := cmd.Start(); err != nil {
			return cmds, err
		}
		cmds = append(cmds, cmd)
		pollChild(prober, port+i)
	}
	return cmds, nil
}

func createStarted(d *daemon, id string, env map[string]string) error {
	ev := d.events.expect("sandbox.started", id)
	if _, err := d.create(id, env); err != nil {
		return err
	}
	if _, err := await(ev); err != nil {
		var sb map[string]any
		gerr := getJSON(d.url("/v1/sandboxes/"+id), &sb)
		return fmt.Errorf("%s: sandbox.started: %w (the daemon says %v %v)", id, err, sb, gerr)
	}
	return nil
}

// benchCrash times kill -9 → sandbox.stopped: rounds of the floor and
// both daemons' plain and grandchild cases, in random order; then, the
// same for children re-adopted after a SIGKILL of their daemons, against
// a floor of stubs spawned with them (agedFloor).
//
// It is long because its three cases share the daemons and the event
// streams it sets up, rounds interleaved.
func benchCrash(c config, b *bench, r *results) error {
	var floor, floorAdopted []time.Duration
	type job struct {
		run func(i int) (time.Duration, error)
		out *[]time.Duration
	}
	measure := func(jobs []job) error {
		for i := range c.runs {
			rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
			for _, j := range jobs {
				d, err := j.run(i)
				if err != nil {
					return err
				}
				*j.out = append(*j.out, d)
			}
		}
		return nil
	}
	jobs := []job{{func(i int) (time.Duration, error) { return b.crashFloor(b.floorPort + i%50) }, &floor}}
	got := map[*stat]*[]time.Duration{}
	for _, x := range b.allArms(r) {
		for _, kind := range []struct {
			env map[string]string
			out *stat
		}{{nil, &x.a.Crash.Plain}, {map[string]string{"STUB_AGENT_GRANDCHILD": "1"}, &x.a.Crash.Grandchild}} {
			ds := &[]time.Duration{}
			got[kind.out] = ds
			d := x.d
			jobs = append(jobs, job{func(i int) (time.Duration, error) {
				id := fmt.Sprintf("crash%d", i)
				if err := createStarted(d, id, kind.env); err != nil {
					return 0, err
				}
				lat, err := crashOnce(d, id)
				d.delete(id)
				return lat, err
			}, ds})
		}
	}
	if err := measure(jobs); err != nil {
		return err
	}
	// Re-adopted children: their daemon was SIGKILLed and restarted.
	aged, err := b.agedFloor(b.floorPort+50, c.runs) // above the other floor's ports
	defer func() {
		for _, cmd := range aged {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	}()
	if err != nil {
		return err
	}
	jobs = []job{{func(i int) (time.Duration, error) { return killFloor(aged[i]), nil }, &floorAdopted}}
	for _, x := range b.allArms(r) {
		for i := range c.runs {
			if err := createStarted(x.d, fmt.Sprintf("adopt%d", i), nil); err != nil {
				return err
			}
		}
		x.d.kill()
		if err := x.d.start(); err != nil {
			return err
		}
		ds := &[]time.Duration{}
		got[&x.a.Crash.Readopted] = ds
		d := x.d
		jobs = append(jobs, job{func(i int) (time.Duration, error) { return crashOnce(d, fmt.Sprintf("adopt%d", i)) }, ds})
	}
	if err := measure(jobs); err != nil {
		return err
	}
	for _, x := range b.allArms(r) {
		for i := range c.runs {
			x.d.delete(fmt.Sprintf("adopt%d", i))
		}
	}
	r.Floor.Crash, r.Floor.CrashAdopted = summarize(floor), summarize(floorAdopted)
	for s, ds := range got {
		*s = summarize(*ds)
	}
	return nil
}

// status reads a field of /proc/<pid>/status, in kB for memory fields.
func status(pid int, field string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}
