package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/service"
	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
)

// runEnsure is what a dev tool calls before using the daemon: if one
// answers at the URL, print the URL; if nothing listens, start one
// (through the systemd user unit when it is installed, else detached) and
// wait for it; if something else holds the port, fail and say so.
func ensureCommand() command {
	var timeout time.Duration
	return command{
		name: "ensure", summary: "make sure a daemon is running (start one if none is)", client: true,
		flags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for a started daemon")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error { return c.ensure(ctx, timeout) },
	}
}

// ensure is the ensure command.
func (c *cli) ensure(ctx context.Context, timeout time.Duration) error {
	cl := c.client()
	_, err := cl.Info(ctx)
	if err == nil {
		fmt.Fprintln(c.stdout, cl.URL())
		return nil
	}
	if !errors.Is(err, client.ErrUnavailable) {
		return fmt.Errorf("something else is listening at %s: %v", cl.URL(), err)
	}
	u, perr := url.Parse(cl.URL())
	if perr != nil || u.Scheme != "http" || !auth.IsLoopbackHost(u.Hostname()) || u.Port() == "" {
		return fmt.Errorf("no daemon at %s, and it can only start one on a loopback http://HOST:PORT address", cl.URL())
	}
	started, how, err := startDaemon(net.JoinHostPort(u.Hostname(), u.Port()))
	if err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	for {
		if _, err := cl.Info(wctx); err == nil {
			fmt.Fprintf(c.stderr, "Started agent-control-plane (%s)\n", how)
			fmt.Fprintln(c.stdout, cl.URL())
			return nil
		} else if !errors.Is(err, client.ErrUnavailable) && wctx.Err() == nil {
			return fmt.Errorf("something else answered at %s: %v", cl.URL(), err)
		}
		select {
		case res := <-started:
			return fmt.Errorf("the daemon exited at once: %s", res)
		case <-wctx.Done():
			return fmt.Errorf("the daemon did not answer at %s within %s (%s)", cl.URL(), timeout, how)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startDaemon starts serve on addr, through systemd when the user unit is
// installed, else as a detached process logging to a file. The channel
// yields the reason if a detached daemon exits.
func startDaemon(addr string) (<-chan string, string, error) {
	never := make(chan string)
	if addr == conf.DefaultListen && unitInstalled() {
		out, err := exec.Command("systemctl", "--user", "start", service.ServiceUnit).CombinedOutput()
		if err != nil {
			return nil, "", fmt.Errorf("systemctl --user start %s: %v: %s", service.ServiceUnit, err, strings.TrimSpace(string(out)))
		}
		return never, "systemd user unit " + service.ServiceUnit, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	logPath := daemonLogPath()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, "", err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd := exec.Command(self, "serve", "--listen", addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlive this command and its terminal
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan string, 1)
	go func() {
		err := cmd.Wait()
		exited <- fmt.Sprintf("%v; last log line: %s", err, lastLine(logPath))
	}()
	return exited, fmt.Sprintf("pid %d, logs in %s", cmd.Process.Pid, logPath), nil
}

func unitInstalled() bool {
	if _, err := exec.LookPath("systemctl"); err != nil {
		return false
	}
	return exec.Command("systemctl", "--user", "cat", service.ServiceUnit).Run() == nil
}

func daemonLogPath() string {
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, _ := os.UserHomeDir()
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "agent-control-plane", "daemon.log")
}

func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
