package service

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden unit files in contrib/systemd")

// The units match the golden files in contrib/systemd, rendered for a
// home of /home/you (go test -run Golden -update rewrites them).
func TestUnitsGolden(t *testing.T) {
	unit, socket := Render(Params{Binary: "/home/you/.local/bin/agent-control-plane", Listen: "127.0.0.1:4025"})
	for name, got := range map[string][]byte{ServiceUnit: unit, SocketUnit: socket} {
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
	unit, socket := Render(Params{Binary: bin, Config: "/etc/hostname", Listen: "127.0.0.1:4025", Path: path,
		Env: []string{"AGENT_CONTROL_PLANE_PORT_RANGE=7100-7199", `AGENT_CONTROL_PLANE_NATIVE_COMMAND=["my agent","--port","%p"]`}})
	if !bytes.Contains(unit, []byte(`Environment="PATH=/usr/bin:/bin:/opt/my tools/bin:/odd\"dir%%h\\x"`)) {
		t.Fatalf("the PATH is not in the unit as systemd reads it:\n%s", unit)
	}
	os.WriteFile(filepath.Join(dir, ServiceUnit), unit, 0o644)
	os.WriteFile(filepath.Join(dir, SocketUnit), socket, 0o644)
	runtime := t.TempDir()
	cmd := exec.Command(analyze, "--user", "verify", filepath.Join(dir, ServiceUnit), filepath.Join(dir, SocketUnit))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime, "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check can fail: a misspelt setting is reported.
	bad := bytes.Replace(unit, []byte("Type=notify"), []byte("Type=notifyy"), 1)
	os.WriteFile(filepath.Join(dir, ServiceUnit), bad, 0o644)
	cmd = exec.Command(analyze, "--user", "verify", filepath.Join(dir, ServiceUnit))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "notifyy") {
		t.Fatalf("systemd-analyze verify did not report a bad unit: %s", out)
	}
}

// The real user manager, where there is one: a dry connection, no changes.
func TestUserManagerReachable(t *testing.T) {
	m, err := NewManager(context.Background())
	if err != nil {
		t.Skipf("no systemd user manager on this machine (%v); install is tested with a fake one", err)
	}
	defer m.Close()
	if _, err := m.State(context.Background(), "default.target"); err != nil {
		t.Fatalf("state of default.target: %v", err)
	}
}
