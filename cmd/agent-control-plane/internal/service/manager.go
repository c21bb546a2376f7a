package service

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// How install, uninstall and status reach the systemd user manager.

// Manager is what install, uninstall and status need from the systemd
// user manager. dbusManager talks to it over D-Bus; systemctlManager runs
// systemctl --user where D-Bus is not reachable; tests use a fake.
type Manager interface {
	Reload(ctx context.Context) error
	Enable(ctx context.Context, files []string) error
	Disable(ctx context.Context, units []string) error
	Restart(ctx context.Context, unit string) error
	Stop(ctx context.Context, unit string) error
	// State is the unit's active state and sub-state, e.g. "active
	// (running)".
	State(ctx context.Context, unit string) (string, error)
	Close()
}

// NewManager connects to the user manager: D-Bus first, systemctl --user
// as the fallback. Tests replace it.
var NewManager = func(ctx context.Context) (Manager, error) {
	conn, err := sddbus.NewUserConnectionContext(ctx)
	if err == nil {
		return dbusManager{conn}, nil
	}
	if _, lerr := exec.LookPath("systemctl"); lerr == nil && exec.CommandContext(ctx, "systemctl", "--user", "show-environment").Run() == nil {
		return systemctlManager{}, nil
	}
	return nil, fmt.Errorf("no systemd user manager is reachable (D-Bus: %v)", err)
}

type dbusManager struct{ c *sddbus.Conn }

func (m dbusManager) Reload(ctx context.Context) error { return m.c.ReloadContext(ctx) }
func (m dbusManager) Enable(ctx context.Context, files []string) error {
	_, _, err := m.c.EnableUnitFilesContext(ctx, files, false, true)
	return err
}
func (m dbusManager) Disable(ctx context.Context, units []string) error {
	_, err := m.c.DisableUnitFilesContext(ctx, units, false)
	return err
}
func (m dbusManager) Restart(ctx context.Context, unit string) error {
	return m.job(ctx, func(ch chan<- string) error {
		_, err := m.c.RestartUnitContext(ctx, unit, "replace", ch)
		return err
	})
}
func (m dbusManager) Stop(ctx context.Context, unit string) error {
	return m.job(ctx, func(ch chan<- string) error {
		_, err := m.c.StopUnitContext(ctx, unit, "replace", ch)
		return err
	})
}

// job starts a job and waits for its result.
func (m dbusManager) job(ctx context.Context, start func(chan<- string) error) error {
	ch := make(chan string, 1)
	if err := start(ch); err != nil {
		return err
	}
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("job %s", res)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (m dbusManager) State(ctx context.Context, unit string) (string, error) {
	st, err := m.c.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil || len(st) == 0 {
		return "", err
	}
	return st[0].ActiveState + " (" + st[0].SubState + ")", nil
}
func (m dbusManager) Close() { m.c.Close() }

type systemctlManager struct{}

func systemctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "systemctl", append([]string{"--user"}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("systemctl --user %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (systemctlManager) Reload(ctx context.Context) error {
	_, err := systemctl(ctx, "daemon-reload")
	return err
}
func (systemctlManager) Enable(ctx context.Context, files []string) error {
	_, err := systemctl(ctx, append([]string{"enable"}, files...)...)
	return err
}
func (systemctlManager) Disable(ctx context.Context, units []string) error {
	_, err := systemctl(ctx, append([]string{"disable"}, units...)...)
	return err
}
func (systemctlManager) Restart(ctx context.Context, unit string) error {
	_, err := systemctl(ctx, "restart", unit)
	return err
}
func (systemctlManager) Stop(ctx context.Context, unit string) error {
	_, err := systemctl(ctx, "stop", unit)
	return err
}
func (systemctlManager) State(ctx context.Context, unit string) (string, error) {
	return systemctl(ctx, "show", "-P", "ActiveState", unit)
}
func (systemctlManager) Close() {}
