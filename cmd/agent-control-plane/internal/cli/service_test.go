package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/cmd/agent-control-plane/internal/service"
)

// fakeManager records what install and uninstall ask of the user manager.
type fakeManager struct {
	calls *[]string
}

func (f fakeManager) rec(s string) error           { *f.calls = append(*f.calls, s); return nil }
func (f fakeManager) Reload(context.Context) error { return f.rec("reload") }
func (f fakeManager) Enable(_ context.Context, files []string) error {
	var names []string
	for _, p := range files {
		names = append(names, filepath.Base(p))
	}
	return f.rec("enable " + strings.Join(names, " "))
}
func (f fakeManager) Disable(_ context.Context, units []string) error {
	return f.rec("disable " + strings.Join(units, " "))
}
func (f fakeManager) Restart(_ context.Context, u string) error { return f.rec("restart " + u) }
func (f fakeManager) Stop(_ context.Context, u string) error    { return f.rec("stop " + u) }
func (f fakeManager) State(context.Context, string) (string, error) {
	return "active (running)", nil
}
func (f fakeManager) Close() {}

func useFakeManager(t *testing.T) *[]string {
	calls := &[]string{}
	old := service.NewManager
	service.NewManager = func(context.Context) (service.Manager, error) { return fakeManager{calls}, nil }
	t.Cleanup(func() { service.NewManager = old })
	return calls
}

// install and uninstall against a temporary XDG_CONFIG_HOME and prefix,
// with the D-Bus step faked.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestInstallUninstall(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "cfg"))
	t.Setenv("AGENT_CONTROL_PLANE_CONFIG", "")
	prefix := filepath.Join(home, "prefix")
	unitDir := filepath.Join(home, "cfg", "systemd", "user")
	calls := useFakeManager(t)

	// --dry-run touches nothing.
	var out, errb bytes.Buffer
	if code := Run([]string{"install", "--dry-run", "--now", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("install --dry-run: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "ExecStart="+filepath.Join(prefix, "bin", "agent-control-plane")+" serve") || len(*calls) != 0 {
		t.Fatalf("dry run printed %q, called %v", out.String(), *calls)
	}
	if _, err := os.Stat(filepath.Join(home, "cfg")); !os.IsNotExist(err) {
		t.Fatal("--dry-run wrote files")
	}

	out.Reset()
	if code := Run([]string{"install", "--now", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("install: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), filepath.Join(prefix, "bin")+" is not on your PATH") {
		t.Errorf("install did not say its bin directory is not on PATH:\n%s", out.String())
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(filepath.Join(prefix, "bin", "agent-control-plane"))
	fi, _ := os.Stat(filepath.Join(prefix, "bin", "agent-control-plane"))
	if err != nil || !bytes.Equal(got, want) || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v, mode %v", err, fi.Mode())
	}
	sum, _ := service.FileSum(self)
	unit, socket := service.Render(service.Params{Binary: filepath.Join(prefix, "bin", "agent-control-plane"), BinarySum: sum, Listen: "127.0.0.1:4025", Path: os.Getenv("PATH")})
	for name, want := range map[string][]byte{service.ServiceUnit: unit, service.SocketUnit: socket} {
		if got, _ := os.ReadFile(filepath.Join(unitDir, name)); !bytes.Equal(got, want) {
			t.Fatalf("%s:\n%s", name, got)
		}
	}
	wantCalls := []string{"reload", "enable " + service.SocketUnit + " " + service.ServiceUnit, "restart " + service.SocketUnit, "restart " + service.ServiceUnit}
	if !slices.Equal(*calls, wantCalls) {
		t.Fatalf("manager calls %v, want %v", *calls, wantCalls)
	}

	// A root with a sandbox in it, to prove uninstall leaves it.
	root := filepath.Join(home, ".local", "state", "agent-control-plane", "sandboxes")
	os.MkdirAll(filepath.Join(root, "kept"), 0o700)
	*calls = nil
	out.Reset()
	if code := Run([]string{"uninstall", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("uninstall: %d %s", code, errb.String())
	}
	for _, p := range []string{filepath.Join(unitDir, service.ServiceUnit), filepath.Join(unitDir, service.SocketUnit), filepath.Join(prefix, "bin", "agent-control-plane")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left behind", p)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "kept")); err != nil || !strings.Contains(out.String(), "left alone") {
		t.Fatalf("uninstall touched the root or did not say so: %v %q", err, out.String())
	}
	wantCalls = []string{"stop " + service.ServiceUnit, "stop " + service.SocketUnit, "disable " + service.ServiceUnit + " " + service.SocketUnit, "reload"}
	if !slices.Equal(*calls, wantCalls) {
		t.Fatalf("manager calls %v, want %v", *calls, wantCalls)
	}

	// uninstall removes only a binary it can prove it installed: not one
	// at another prefix, nor one whose content changed since.
	other := filepath.Join(home, "elsewhere")
	os.MkdirAll(filepath.Join(other, "bin"), 0o755)
	os.WriteFile(filepath.Join(other, "bin", "agent-control-plane"), []byte("#!/bin/sh\necho mine\n"), 0o755)
	if code := Run([]string{"install", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("install: %d %s", code, errb.String())
	}
	out.Reset()
	if code := Run([]string{"uninstall", "--prefix", other}, &out, &errb); code != 0 {
		t.Fatalf("uninstall --prefix elsewhere: %d %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(other, "bin", "agent-control-plane")); err != nil || !strings.Contains(out.String(), "Left the binary alone") {
		t.Fatalf("uninstall --prefix elsewhere removed a binary it never installed: %v %q", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(prefix, "bin", "agent-control-plane")); !os.IsNotExist(err) {
		t.Fatalf("the installed binary (named by the unit) stayed: %v", err)
	}
	if code := Run([]string{"install", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("install: %d %s", code, errb.String())
	}
	os.WriteFile(filepath.Join(prefix, "bin", "agent-control-plane"), []byte("#!/bin/sh\necho rebuilt by hand\n"), 0o755)
	out.Reset()
	if code := Run([]string{"uninstall", "--prefix", prefix}, &out, &errb); code != 0 {
		t.Fatalf("uninstall: %d %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(prefix, "bin", "agent-control-plane")); err != nil || !strings.Contains(out.String(), "content changed") {
		t.Fatalf("uninstall removed a binary whose content changed: %v %q", err, out.String())
	}

	// A unit someone else wrote is neither replaced nor removed.
	os.MkdirAll(unitDir, 0o755)
	os.WriteFile(filepath.Join(unitDir, service.ServiceUnit), []byte("[Service]\nExecStart=/bin/mine\n"), 0o644)
	if code := Run([]string{"install", "--prefix", prefix}, &out, &errb); code == 0 {
		t.Fatal("install replaced a foreign unit")
	}
	if code := Run([]string{"uninstall", "--prefix", prefix}, &out, &errb); code == 0 {
		t.Fatal("uninstall removed a foreign unit")
	}
	if b, _ := os.ReadFile(filepath.Join(unitDir, service.ServiceUnit)); string(b) != "[Service]\nExecStart=/bin/mine\n" {
		t.Fatalf("foreign unit changed: %q", b)
	}
}

// install carries every setting it finds in its environment into the
// service, as the daemon would have read them, but a secret, which it
// names.
func TestInstallCarriesTheEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "cfg"))
	t.Setenv("AGENT_CONTROL_PLANE_CONFIG", "")
	t.Setenv("AGENT_CONTROL_PLANE_PORT_RANGE", "7100-7199")
	t.Setenv("AGENT_CONTROL_PLANE_LOG_LEVEL", "debug")
	t.Setenv("AGENT_CONTROL_PLANE_LISTEN", "127.0.0.1:4811")
	t.Setenv("AGENT_CONTROL_PLANE_TOKEN", "0123456789abcdef0123456789abcdef")
	useFakeManager(t)
	var out, errb bytes.Buffer
	if code := Run([]string{"install", "--dry-run", "--prefix", filepath.Join(home, "prefix")}, &out, &errb); code != 0 {
		t.Fatalf("install --dry-run: %d %s", code, errb.String())
	}
	for _, want := range []string{`Environment="AGENT_CONTROL_PLANE_PORT_RANGE=7100-7199"`, `Environment="AGENT_CONTROL_PLANE_LOG_LEVEL=debug"`, "ListenStream=127.0.0.1:4811"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the units lack %s:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "0123456789abcdef") || !strings.Contains(errb.String(), "not carrying AGENT_CONTROL_PLANE_TOKEN") {
		t.Errorf("the token: stdout %q, stderr %q", out.String(), errb.String())
	}
}
