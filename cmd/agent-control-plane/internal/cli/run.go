package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
)

// exitInterrupted is the conventional code of a command ended by Ctrl-C.
const exitInterrupted = 130

// runRun is sandbox-per-run: create a sandbox labelled origin=cli, show
// progress until it is ready, print it, keep it alive while attached, and
// on Ctrl-C either leave it running (saying how to delete it) or, with
// --rm, delete it.
func runCommand() command {
	var name, snapshot string
	var autostop *float64
	var rm bool
	var timeout time.Duration
	labels, env := kvFlag{}, kvFlag{}
	return command{
		name: "run", summary: "create a sandbox, keep it alive while attached", client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&name, "name", "", "sandbox `name` (default cli-<random>)")
			fs.StringVar(&snapshot, "snapshot", "", "the snapshot to run (agent-control-plane snapshots lists them; default: the one named default)")
			fs.Var(labels, "label", "label `k=v` (repeatable); origin=cli is always set")
			fs.Var(env, "env", "environment variable `K=V` for the agent-server (repeatable)")
			minutesFlag(fs, &autostop)
			fs.BoolVar(&rm, "rm", false, "delete the sandbox when this command ends")
			fs.DurationVar(&timeout, "timeout", 0, "how long to wait for it to start (default: the daemon's startup timeout + 15s)")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error {
			req := wire.CreateSandboxRequest{Name: name, Snapshot: snapshot, Labels: labels, EnvVars: env, AutoStopInterval: autostop}
			return c.run(ctx, req, rm, timeout)
		},
	}
}

// run is the run command: create, wait, attach, clean up.
func (c *cli) run(ctx context.Context, req wire.CreateSandboxRequest, rm bool, timeout time.Duration) error {
	if req.Name == "" {
		b := make([]byte, 3)
		rand.Read(b)
		req.Name = "cli-" + hex.EncodeToString(b)
	}
	req.Labels["origin"] = "cli"
	cl := c.client()
	if _, err := cl.Info(ctx); err != nil {
		return err
	}
	sb, err := cl.Create(ctx, req)
	if err != nil {
		return err
	}
	// From here on the sandbox exists: every way out cleans up with --rm.
	// stopped: the sandbox is known to run no more (it crashed, or
	// someone stopped or deleted it), so it is not "left running".
	cleanup := func(stopped bool) {
		if !rm {
			if stopped {
				fmt.Fprintf(c.stderr, "Sandbox %s is not running; its logs: agent-control-plane logs %s; delete it with: agent-control-plane rm %s\n", inert(sb.ID), inert(sb.ID), inert(sb.ID))
			} else {
				fmt.Fprintf(c.stderr, "Sandbox %s is left running; delete it with: agent-control-plane rm %s\n", inert(sb.ID), inert(sb.ID))
			}
			return
		}
		dctx, dcancel := context.WithTimeout(context.Background(), client.DefaultTimeout+client.StopAllowance)
		defer dcancel()
		if err := cl.Delete(dctx, sb.ID); err != nil {
			c.fail(fmt.Errorf("delete %s: %w", sb.ID, err))
			return
		}
		fmt.Fprintf(c.stderr, "Deleted sandbox %s\n", inert(sb.ID))
	}

	ready, err := c.waitStarted(ctx, cl, sb, timeout)
	if err != nil {
		var nre *client.NotReadyError
		cleanup(errors.As(err, &nre))
		if ctx.Err() != nil {
			return exitError(exitInterrupted)
		}
		return err
	}
	sb = ready
	if c.json {
		c.printJSON(sb)
	} else {
		fmt.Fprintf(c.stdout, "Sandbox: %s\nPreview: %s\n", inert(sb.ID), inert(sb.PreviewURL))
	}
	if rm {
		fmt.Fprintln(c.stderr, "Keeping it alive while attached. Ctrl-C stops and deletes it.")
	} else {
		fmt.Fprintln(c.stderr, "Keeping it alive while attached. Ctrl-C detaches; the sandbox keeps running.")
	}

	err = c.attach(ctx, cl, sb)
	var gone *stoppedError
	cleanup(errors.As(err, &gone))
	if err != nil {
		return err
	}
	return exitError(exitInterrupted)
}

// attach keeps sb alive until ctx ends, and returns an error if the
// sandbox stops meanwhile (crash, auto-stop, someone else's stop).
func (c *cli) attach(ctx context.Context, cl *client.Client, sb wire.SandboxInfo) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan string, 1)
	go cl.Watch(ctx, map[string]string{"origin": "cli"}, func(ev wire.StreamEvent) error {
		switch {
		case ev.Type == wire.EventReplaced:
			i := slices.IndexFunc(ev.Sandboxes, func(s wire.SandboxInfo) bool { return s.ID == sb.ID })
			if i < 0 {
				stopped <- "deleted"
				return errors.New("done")
			}
			if s := ev.Sandboxes[i]; s.State != wire.StateStarted {
				stopped <- reason(s)
				return errors.New("done")
			}
		case ev.Sandbox.ID == sb.ID && (ev.Type == wire.EventStopped || ev.Type == wire.EventDeleted):
			stopped <- reason(*ev.Sandbox)
			return errors.New("done")
		}
		return nil
	})
	every := keepAliveEvery(sb.AutoStopInterval)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case why := <-stopped:
			if why == "" {
				why = "stopped"
			}
			return &stoppedError{fmt.Sprintf("sandbox %s stopped: %s", sb.ID, why)}
		case <-t.C:
			if err := cl.RefreshActivity(ctx, sb.ID); err != nil && ctx.Err() == nil {
				return fmt.Errorf("keep-alive for %s: %w", sb.ID, err)
			}
		}
	}
}

// stoppedError: the attached sandbox stopped.
type stoppedError struct{ msg string }

func (e *stoppedError) Error() string { return e.msg }

// keepAliveEvery refreshes three times per idle interval, at most once a
// second and at least once a minute.
func keepAliveEvery(minutes float64) time.Duration {
	d := time.Duration(minutes * float64(time.Minute) / 3)
	return min(max(d, time.Second), time.Minute)
}

// waitStarted waits for the daemon's word that sb is started (its probe of
// the ready path passed) or stopped, saying what it waits for, up to
// timeout (0: the daemon's startup timeout plus a margin).
func (c *cli) waitStarted(ctx context.Context, cl *client.Client, sb wire.SandboxInfo, timeout time.Duration) (wire.SandboxInfo, error) {
	readyPath, startupMs := "its ready path", int64(time.Minute/time.Millisecond)
	// The snapshot it runs says how it is probed; one the daemon does not
	// list (a docker image) is probed as the daemon's defaults say.
	found := false
	if sb.Snapshot != "" {
		if snaps, err := cl.Snapshots(ctx); err == nil {
			for _, s := range snaps {
				if s.Name == sb.Snapshot {
					readyPath, startupMs, found = s.ReadyPath, s.StartupTimeoutMs, true
				}
			}
		}
	}
	if !found {
		if info, err := cl.Info(ctx); err == nil {
			readyPath, startupMs = cmp.Or(info.ReadyPath, readyPath), cmp.Or(info.StartupTimeoutMs, startupMs)
		}
	}
	startup := time.Duration(startupMs) * time.Millisecond
	if timeout <= 0 {
		timeout = startup + 15*time.Second
	}
	stop := c.progress(fmt.Sprintf("Waiting for sandbox %s to start: the daemon probes %s on port %d (up to %s)", inert(sb.ID), inert(readyPath), sb.Port, timeout))
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got, err := cl.WaitForReady(wctx, sb.ID)
	stop()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return got, fmt.Errorf("sandbox %s did not start within %s: the daemon is still probing %s on port %d (agent-control-plane logs %s shows what it printed)", inert(sb.ID), timeout, inert(readyPath), sb.Port, inert(sb.ID))
	}
	return got, err
}

// progress shows what is happening until the returned func is called: a
// spinner on a terminal, one plain line otherwise.
func (c *cli) progress(msg string) func() {
	if !isTerminal(c.stderr) {
		fmt.Fprintln(c.stderr, msg+"…")
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
		start := time.Now()
		t := time.NewTicker(80 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(c.stderr, "\r%c %s (%.1fs)", frames[i%len(frames)], msg, time.Since(start).Seconds())
			select {
			case <-done:
				fmt.Fprintf(c.stderr, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
