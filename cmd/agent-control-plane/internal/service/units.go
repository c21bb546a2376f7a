// Package service installs the daemon as a systemd user service: the
// units it writes (a socket that keeps the API's port open across
// restarts, a Type=notify service), where they go, the files install
// writes and the proofs uninstall needs before it removes one, and the
// user manager it talks to (D-Bus, or systemctl where D-Bus is not
// reachable). The CLI's install, uninstall and status commands drive it.
package service

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"text/template"
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
	ServiceUnit = "agent-control-plane.service"
	SocketUnit  = "agent-control-plane.socket"
	// UnitHeader marks a unit file as ours: uninstall removes only files
	// that carry it, and install replaces only those.
	UnitHeader = "# Written by agent-control-plane install; agent-control-plane uninstall removes it."
	// BinaryLine names the binary install copied, with its hash: the
	// proof uninstall needs before it removes a binary.
	BinaryLine = "# Installed binary: "
)

// Params fill the unit templates.
type Params struct {
	Binary    string // absolute path of the installed binary
	BinarySum string // its sha256, hex: what uninstall checks before it removes it
	// Path is the PATH the daemon (and so every native sandbox) gets:
	// the one install ran with, where agents' programs are found. A
	// user manager's own PATH is short (no ~/.local/bin, no nvm).
	Path   string
	Config string // --config for serve; empty for none
	Listen string // the socket's address
	// Env are the daemon's settings from the environment install ran
	// with (KEY=VALUE), as the daemon would have read them.
	Env []string
}

var serviceTmpl = template.Must(template.New("service").Funcs(template.FuncMap{"unitQuote": unitQuote}).Parse(UnitHeader + `
{{if .BinarySum}}` + BinaryLine + `{{.Binary}} sha256:{{.BinarySum}}
{{end}}[Unit]
Description=agent-control-plane: the local control plane for AI agent sandboxes
Documentation=https://github.com/agent-control-plane/agent-control-plane#readme
Requires=` + SocketUnit + `
After=` + SocketUnit + `

[Service]
Type=notify
NotifyAccess=main
{{if .Path}}# The PATH install ran with: edit it here (systemctl --user edit) when
# an agent's program moves.
Environment={{unitQuote (print "PATH=" .Path)}}
{{end}}{{if .Env}}# The settings install found in its environment.
{{range .Env}}Environment={{unitQuote .}}
{{end}}{{end}}ExecStart={{.Binary}} serve{{if .Config}} --config {{.Config}}{{end}}
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

var socketTmpl = template.Must(template.New("socket").Parse(UnitHeader + `
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

func Render(p Params) (service, socket []byte) {
	var a, b bytes.Buffer
	_ = serviceTmpl.Execute(&a, p)
	_ = socketTmpl.Execute(&b, p)
	return a.Bytes(), b.Bytes()
}

// Paths are where install puts things.
type Paths struct {
	Binary, Service, Socket string
}

func PathsFor(prefix string) (Paths, error) {
	cfg := os.Getenv("XDG_CONFIG_HOME")
	if cfg == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return Paths{}, err
		}
		cfg = filepath.Join(home, ".config")
	}
	dir := filepath.Join(cfg, "systemd", "user")
	return Paths{
		Binary:  filepath.Join(prefix, "bin", "agent-control-plane"),
		Service: filepath.Join(dir, ServiceUnit),
		Socket:  filepath.Join(dir, SocketUnit),
	}, nil
}

func DefaultPrefix() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".local")
}
