package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden unit files in contrib/systemd")

// The units match the golden files in contrib/systemd, rendered for a
// home of /home/you (go test -run Golden -update rewrites them).
func TestUnitsGolden(t *testing.T) {
	service, socket := renderUnits(unitParams{Binary: "/home/you/.local/bin/agent-control-plane", Listen: "127.0.0.1:4025"})
	for name, got := range map[string][]byte{serviceUnit: service, socketUnit: socket} {
		path := filepath.Join("..", "..", "..", "..", "contrib", "systemd", name)
		if *update {
			os.WriteFile(path, got, 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (go test -run Golden -update):\n%s", name, path, got)
		}
	}
}

// systemd itself accepts the units: systemd-analyze verify prints nothing.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian's systemd package; .ci/run installs it)")
	}
	dir := t.TempDir()
	bin, _ := os.Executable() // any existing executable: verify checks ExecStart's path
	// A PATH with what a unit file must escape: a space, a quote, a
	// specifier's %, a backslash.
	path := `/usr/bin:/bin:/opt/my tools/bin:/odd"dir%h\x`
	service, socket := renderUnits(unitParams{Binary: bin, Config: "/etc/hostname", Listen: "127.0.0.1:4025", Path: path})
	if !bytes.Contains(service, []byte(`Environment="PATH=/usr/bin:/bin:/opt/my tools/bin:/odd\"dir%%h\\x"`)) {
		t.Fatalf("the PATH is not in the unit as systemd reads it:\n%s", service)
	}
	os.WriteFile(filepath.Join(dir, serviceUnit), service, 0o644)
	os.WriteFile(filepath.Join(dir, socketUnit), socket, 0o644)
	runtime := t.TempDir()
	cmd := exec.Command(analyze, "--user", "verify", filepath.Join(dir, serviceUnit), filepath.Join(dir, socketUnit))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime, "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check can fail: a misspelt setting is reported.
	bad := bytes.Replace(service, []byte("Type=notify"), []byte("Type=notifyy"), 1)
	os.WriteFile(filepath.Join(dir, serviceUnit), bad, 0o644)
	cmd = exec.Command(analyze, "--user", "verify", filepath.Join(dir, serviceUnit))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "notifyy") {
		t.Fatalf("systemd-analyze verify did not report a bad unit: %s", out)
	}
}

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
	old := newManager
	newManager = func(context.Context) (unitManager, error) { return fakeManager{calls}, nil }
	t.Cleanup(func() { newManager = old })
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
	sum, _ := fileSum(self)
	service, socket := renderUnits(unitParams{Binary: filepath.Join(prefix, "bin", "agent-control-plane"), BinarySum: sum, Listen: "127.0.0.1:4025", Path: os.Getenv("PATH")})
	for name, want := range map[string][]byte{serviceUnit: service, socketUnit: socket} {
		if got, _ := os.ReadFile(filepath.Join(unitDir, name)); !bytes.Equal(got, want) {
			t.Fatalf("%s:\n%s", name, got)
		}
	}
	wantCalls := []string{"reload", "enable " + socketUnit + " " + serviceUnit, "restart " + socketUnit, "restart " + serviceUnit}
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
	for _, p := range []string{filepath.Join(unitDir, serviceUnit), filepath.Join(unitDir, socketUnit), filepath.Join(prefix, "bin", "agent-control-plane")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left behind", p)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "kept")); err != nil || !strings.Contains(out.String(), "left alone") {
		t.Fatalf("uninstall touched the root or did not say so: %v %q", err, out.String())
	}
	wantCalls = []string{"stop " + serviceUnit, "stop " + socketUnit, "disable " + serviceUnit + " " + socketUnit, "reload"}
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
	os.WriteFile(filepath.Join(unitDir, serviceUnit), []byte("[Service]\nExecStart=/bin/mine\n"), 0o644)
	if code := Run([]string{"install", "--prefix", prefix}, &out, &errb); code == 0 {
		t.Fatal("install replaced a foreign unit")
	}
	if code := Run([]string{"uninstall", "--prefix", prefix}, &out, &errb); code == 0 {
		t.Fatal("uninstall removed a foreign unit")
	}
	if b, _ := os.ReadFile(filepath.Join(unitDir, serviceUnit)); string(b) != "[Service]\nExecStart=/bin/mine\n" {
		t.Fatalf("foreign unit changed: %q", b)
	}
}

// The real user manager, where there is one: a dry connection, no changes.
func TestUserManagerReachable(t *testing.T) {
	m, err := newManager(context.Background())
	if err != nil {
		t.Skipf("no systemd user manager on this machine (%v); install is tested with a fake one", err)
	}
	defer m.Close()
	if _, err := m.State(context.Background(), "default.target"); err != nil {
		t.Fatalf("state of default.target: %v", err)
	}
}
