package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/agent-control-plane/agent-control-plane/conf"
)

// The daemon as a systemd user service: install, uninstall, status.
//
// Two units are written: agent-control-plane.socket holds the API's
// address, so that the port stays open while the daemon restarts (clients
// wait in the backlog, never see a refused connection) and a connection
// starts the daemon if it is down; agent-control-plane.service runs it
// (Type=notify: READY=1 only after rehydration, with a watchdog).
//
// Stopping or restarting the service never kills sandboxes: KillMode=process
// signals only the daemon; children, which outlive it by design, stay and
// are re-adopted by the next start (containerd's choice for the same
// reason). OOMPolicy=continue keeps a sandbox's OOM kill from stopping the
// service, and Delegate=yes lets the daemon manage cgroups below its own.
const (
	serviceUnit = "agent-control-plane.service"
	socketUnit  = "agent-control-plane.socket"
	// unitHeader marks a unit file as ours: uninstall removes only files
	// that carry it, and install replaces only those.
	unitHeader = "# Written by agent-control-plane install; agent-control-plane uninstall removes it."
	// binaryLine names the binary install copied, with its hash: the
	// proof uninstall needs before it removes a binary.
	binaryLine = "# Installed binary: "
)

// unitParams fill the unit templates.
type unitParams struct {
	Binary    string // absolute path of the installed binary
	BinarySum string // its sha256, hex: what uninstall checks before it removes it
	// Path is the PATH the daemon (and so every native sandbox) gets:
	// the one install ran with, where agents' programs are found. A
	// user manager's own PATH is short (no ~/.local/bin, no nvm).
	Path   string
	Config string // --config for serve; empty for none
	Listen string // the socket's address
}

var serviceTmpl = template.Must(template.New("service").Funcs(template.FuncMap{"unitQuote": unitQuote}).Parse(unitHeader + `
{{if .BinarySum}}` + binaryLine + `{{.Binary}} sha256:{{.BinarySum}}
{{end}}[Unit]
Description=agent-control-plane: the local control plane for AI agent sandboxes
Documentation=https://github.com/agent-control-plane/agent-control-plane#readme
Requires=` + socketUnit + `
After=` + socketUnit + `

[Service]
Type=notify
NotifyAccess=main
{{if .Path}}# The PATH install ran with: edit it here (systemctl --user edit) when
# an agent's program moves.
Environment={{unitQuote (print "PATH=" .Path)}}
{{end}}ExecStart={{.Binary}} serve{{if .Config}} --config {{.Config}}{{end}}
# reload: the log level, auto-stop defaults, the token and the snapshots.
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=1s
WatchdogSec=30s
TimeoutStopSec=45s
# Stop and restart signal the daemon only: sandboxes outlive it by design
# and the next start re-adopts them.
KillMode=process
# A sandbox killed for memory is the sandbox's business, not the service's.
OOMPolicy=continue
Delegate=yes
UMask=0077

[Install]
WantedBy=default.target
`))

var socketTmpl = template.Must(template.New("socket").Parse(unitHeader + `
[Unit]
Description=agent-control-plane API socket

[Socket]
ListenStream={{.Listen}}
NoDelay=true

[Install]
WantedBy=sockets.target
`))

// unitQuote quotes a value for a unit file: in double quotes, with
// backslash, quote and the specifier character % escaped.
func unitQuote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "\n", " ")
	return `"` + r.Replace(v) + `"`
}

func renderUnits(p unitParams) (service, socket []byte) {
	var a, b bytes.Buffer
	_ = serviceTmpl.Execute(&a, p)
	_ = socketTmpl.Execute(&b, p)
	return a.Bytes(), b.Bytes()
}

// servicePaths are where install puts things.
type servicePaths struct {
	binary, service, socket string
}

func pathsFor(prefix string) (servicePaths, error) {
	cfg := os.Getenv("XDG_CONFIG_HOME")
	if cfg == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return servicePaths{}, err
		}
		cfg = filepath.Join(home, ".config")
	}
	dir := filepath.Join(cfg, "systemd", "user")
	return servicePaths{
		binary:  filepath.Join(prefix, "bin", "agent-control-plane"),
		service: filepath.Join(dir, serviceUnit),
		socket:  filepath.Join(dir, socketUnit),
	}, nil
}

func defaultPrefix() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".local")
}

func installCommand() command {
	var o installOptions
	return command{
		name: "install", summary: "install as a systemd user service (--now starts it)",
		flags: func(fs *flag.FlagSet) {
			fs.Bool("user", true, "install as a systemd user service (the only kind)")
			fs.BoolVar(&o.now, "now", false, "start (or restart) the service once installed")
			fs.StringVar(&o.prefix, "prefix", defaultPrefix(), "install the binary into `DIR`/bin")
			fs.StringVar(&o.config, "config", "", "config `file` the service runs with (default: serve's own, ~/.config/agent-control-plane/config.toml when it exists)")
			fs.BoolVar(&o.dry, "dry-run", false, "print what would be done, change nothing")
		},
		exec: func(ctx context.Context, c *cli, _ []string) error { return c.install(ctx, o) },
	}
}

type installOptions struct {
	now, dry       bool
	prefix, config string
}

// install copies this binary to DIR/bin and installs the user units.
//
// It is long because an install is one ordered sequence (binary, units,
// manager, start, check), each step reported as it is done.
func (c *cli) install(ctx context.Context, o installOptions) error {
	p, err := pathsFor(o.prefix)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if o.config != "" {
		if o.config, err = filepath.Abs(o.config); err != nil {
			return err
		}
	}
	cfg, err := conf.Load(conf.Sources{File: o.config})
	if err != nil {
		return err
	}
	binary, err := filepath.Abs(p.binary)
	if err != nil {
		return err
	}
	for _, f := range []string{p.service, p.socket} {
		if err := ownUnit(f); err != nil {
			return err
		}
	}
	sum, err := fileSum(self)
	if err != nil {
		return fmt.Errorf("read this binary: %w", err)
	}
	service, socket := renderUnits(unitParams{Binary: binary, BinarySum: sum, Config: o.config, Listen: cfg.Listen, Path: os.Getenv("PATH")})
	if o.dry {
		fmt.Fprintf(c.stdout, "Would copy %s to %s (mode 0755).\n", self, binary)
		fmt.Fprintf(c.stdout, "Would write %s:\n%s\nWould write %s:\n%s\n", p.socket, socket, p.service, service)
		fmt.Fprintf(c.stdout, "Would reload the user manager and enable %s and %s", socketUnit, serviceUnit)
		if o.now {
			fmt.Fprint(c.stdout, ", then start them")
		}
		fmt.Fprintln(c.stdout, ".")
		return nil
	}
	if self != binary {
		if err := copyExecutable(self, binary); err != nil {
			return fmt.Errorf("install the binary: %w", err)
		}
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{p.socket, socket}, {p.service, service}} {
		if err := writeFileAtomic(f.path, f.data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	fmt.Fprintf(c.stdout, "Installed %s\nWrote %s\nWrote %s\n", binary, p.socket, p.service)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, err := newManager(ctx)
	if err != nil {
		fmt.Fprintf(c.stderr, "agent-control-plane: %v.\nThe units are written; once a user manager runs, enable them with:\n  systemctl --user daemon-reload && systemctl --user enable --now %s %s\n", err, socketUnit, serviceUnit)
		return exitError(exitFailure)
	}
	defer m.Close()
	if err := m.Reload(ctx); err != nil {
		return fmt.Errorf("reload the user manager: %w", err)
	}
	if err := m.Enable(ctx, []string{p.socket, p.service}); err != nil {
		return fmt.Errorf("enable the units: %w", err)
	}
	fmt.Fprintf(c.stdout, "Enabled %s and %s: the daemon starts with your session.\n", socketUnit, serviceUnit)
	if o.now {
		// The socket first, so that the service finds its listener; a
		// restart picks up the binary just installed. Sandboxes survive it.
		for _, u := range []string{socketUnit, serviceUnit} {
			if err := m.Restart(ctx, u); err != nil {
				return fmt.Errorf("start %s: %w", u, err)
			}
		}
		fmt.Fprintln(c.stdout, "Started. Logs: journalctl --user -u agent-control-plane")
	}
	if tip := lingerTip(); tip != "" {
		fmt.Fprintln(c.stdout, tip)
	}
	if !onPath(filepath.Dir(binary)) {
		fmt.Fprintf(c.stdout, "%s is not on your PATH: add it (export PATH=\"%s:$PATH\" in your shell's profile), then run: agent-control-plane status\n", filepath.Dir(binary), filepath.Dir(binary))
	} else {
		fmt.Fprintln(c.stdout, "Next: agent-control-plane status")
	}
	return nil
}

// onPath reports whether dir is one of $PATH's directories.
func onPath(dir string) bool {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.Clean(d) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// installedBinary returns the binary the service unit at path says
// install copied, when the file there still has the hash recorded;
// otherwise "" and why it is not removed ("" when there is no binary to
// speak of).
func installedBinary(path string) (binary, why string) {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte(unitHeader)) {
		return "", ""
	}
	var want string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, binaryLine); ok {
			if i := strings.LastIndex(rest, " sha256:"); i > 0 {
				binary, want = rest[:i], rest[i+len(" sha256:"):]
			}
		}
	}
	if binary == "" {
		return "", "the service does not say which binary install copied (written by an older install)"
	}
	sum, err := fileSum(binary)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", ""
	case err != nil:
		return "", err.Error()
	case sum != want:
		return "", binary + " is not the file install copied (its content changed)"
	}
	return binary, ""
}

// fileSum is the sha256 of a file, hex.
func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ownUnit refuses to replace a unit file that install did not write.
func ownUnit(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte(unitHeader)) {
		return fmt.Errorf("%s exists and was not written by agent-control-plane install; it is left alone (move it away to install)", path)
	}
	return nil
}

// lingerTip says how to keep the service running without a login session,
// when lingering is off.
func lingerTip() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join("/var/lib/systemd/linger", u.Username)); err == nil {
		return ""
	}
	return "Lingering is off for " + u.Username + ": the daemon stops when your last session ends. To keep it (and its sandboxes' supervision) running: loginctl enable-linger " + u.Username
}

// copyExecutable installs src at dst, mode 0755. It is a rename, not a
// write over the file: a running daemon keeps its binary, and nobody ever
// sees half of one.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return replaceFile(dst, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return replaceFile(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// replaceFile writes a file with fill under a temporary name in path's
// directory, with its mode set before any content, synced, then renamed
// over path.
func replaceFile(path string, perm os.FileMode, fill func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(perm)
	if err == nil {
		err = fill(tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
