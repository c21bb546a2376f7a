package main

import (
	"fmt"
	"io"
	"os"
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

func benchCrash(c config, d *daemon, r *results) error {
	for _, kind := range []struct {
		env map[string]string
		out *stat
	}{{nil, &r.Crash.Plain}, {map[string]string{"STUB_AGENT_GRANDCHILD": "1"}, &r.Crash.Grandchild}} {
		var ds []time.Duration
		for i := range c.runs {
			id := fmt.Sprintf("crash%d", i)
			if err := createStarted(d, id, kind.env); err != nil {
				return err
			}
			lat, err := crashOnce(d, id)
			if err != nil {
				return err
			}
			ds = append(ds, lat)
			d.delete(id)
		}
		*kind.out = summarize(ds)
	}
	// Re-adopted children: their daemon was SIGKILLed and restarted.
	for i := range c.runs {
		if err := createStarted(d, fmt.Sprintf("adopt%d", i), nil); err != nil {
			return err
		}
	}
	d.kill()
	if err := d.start(); err != nil {
		return err
	}
	var ds []time.Duration
	for i := range c.runs {
		lat, err := crashOnce(d, fmt.Sprintf("adopt%d", i))
		if err != nil {
			return err
		}
		ds = append(ds, lat)
	}
	for i := range c.runs {
		d.delete(fmt.Sprintf("adopt%d", i))
	}
	r.Crash.Readopted = summarize(ds)
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

func (d *daemon) goroutines() int {
	resp, err := httpc.Get(d.url("/metrics"))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
