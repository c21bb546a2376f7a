package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// systemd integration of serve. Outside systemd every part is a silent
// no-op: no NOTIFY_SOCKET, no LISTEN_FDS, no JOURNAL_STREAM.

// notifier sends sd_notify messages to the service manager.
type notifier struct {
	log *slog.Logger
}

// send sends state; a failure is logged once at debug level, never fatal.
func (n notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Debug("sd_notify", "err", err)
	}
}

// statusLine is the STATUS= summary: "12 sandboxes, 9 started".
func statusLine(st supervisor.Stats) string {
	total, started := 0, 0
	for _, byState := range st.Sandboxes {
		for state, n := range byState {
			total += n
			if state == supervisor.Started {
				started += n
			}
		}
	}
	return fmt.Sprintf("%d sandboxes, %d started", total, started)
}

// ready tells the manager the daemon is up (after rehydration, with the
// listener serving) and then, until ctx ends, pings the watchdog at half
// its interval with a fresh STATUS. A ping is sent only after the
// supervisor answered a call, so a wedged supervisor stops the pings and
// systemd restarts the daemon.
func (n notifier) ready(ctx context.Context, sup *supervisor.Supervisor) {
	n.send("READY=1\nSTATUS=" + statusLine(sup.Stats()))
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.send("WATCHDOG=1\nSTATUS=" + statusLine(sup.Stats()))
		}
	}
}

// stopping tells the manager the daemon is shutting down.
func (n notifier) stopping() { n.send("STOPPING=1\nSTATUS=stopping; sandboxes keep running") }

// passedListener returns the API listener handed over by socket activation
// (LISTEN_FDS), or nil when none was passed. More than one, or one that is
// not a TCP listener on an address the configuration allows, is an error.
func passedListener(cfg conf.Config) (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	var got []net.Listener
	for _, ln := range lns {
		if ln != nil {
			got = append(got, ln)
		}
	}
	switch {
	case len(got) == 0:
		return nil, nil
	case len(got) > 1:
		return nil, fmt.Errorf("socket activation passed %d sockets; want one", len(got))
	}
	ln := got[0]
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("socket activation passed a %s socket; want TCP", ln.Addr().Network())
	}
	if !cfg.AllowNonLoopback && !addr.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("socket activation passed %s, which is not a loopback address; set allow_non_loopback = true to expose the daemon", addr)
	}
	return ln, nil
}

// journalStderr reports whether stderr is connected to the journal
// (JOURNAL_STREAM names its device and inode), where a timestamp in each
// line would only repeat the journal's own.
func journalStderr() bool {
	v := os.Getenv("JOURNAL_STREAM")
	if v == "" {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(v, "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(2, &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}
