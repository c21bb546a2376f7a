package conf

import "time"

// DefaultSnapshot is the snapshot a create that names none runs; the
// [native] table describes it unless [snapshots.default] does.
const DefaultSnapshot = "default"

// Snapshot is one [snapshots.NAME] table: what a sandbox created from it
// runs. Zero fields take the daemon's defaults. The daemon checks them
// against its runtimes when it starts (supervisor.New).
type Snapshot struct {
	Runtime string // "native" (when empty) or "docker"
	// Command is the argv; "${PORT}", "${AGENT_SANDBOX_ID}",
	// "${AGENT_WORKSPACE_DIR}" and other environment references are
	// expanded as systemd does in ExecStart. Empty: the bundled stub
	// agent (native) or the image's own command (docker).
	Command        []string
	Image          string // docker: the image; empty: [docker] image
	ReadyPath      string
	Env            map[string]string
	StartupTimeout time.Duration
	StopGrace      *time.Duration
}

// snapshotFile is a [snapshots.NAME] table as written.
type snapshotFile struct {
	Runtime        *string           `toml:"runtime"`
	Command        []string          `toml:"command"`
	Image          *string           `toml:"image"`
	ReadyPath      *string           `toml:"ready_path"`
	Env            map[string]string `toml:"env"`
	StartupTimeout *duration         `toml:"startup_timeout"`
	StopGrace      *duration         `toml:"stop_grace"`
}

func (f snapshotFile) snapshot() Snapshot {
	var p Snapshot
	set(&p.Runtime, f.Runtime)
	p.Command = f.Command
	set(&p.Image, f.Image)
	set(&p.ReadyPath, f.ReadyPath)
	p.Env = f.Env
	setDur(&p.StartupTimeout, f.StartupTimeout)
	if f.StopGrace != nil {
		g := f.StopGrace.Duration
		p.StopGrace = &g
	}
	return p
}

// withDefaultSnapshot adds the snapshot named default from the [native]
// table when the configuration defines none.
func (c *Config) withDefaultSnapshot() {
	if _, ok := c.Snapshots[DefaultSnapshot]; ok {
		return
	}
	if c.Snapshots == nil {
		c.Snapshots = map[string]Snapshot{}
	}
	c.Snapshots[DefaultSnapshot] = Snapshot{Runtime: "native", Command: c.NativeCommand, ReadyPath: c.ReadyPath}
	for _, k := range []string{"command", "ready_path"} {
		if o, ok := c.Origins["native."+k]; ok {
			c.Origins["snapshots."+DefaultSnapshot+"."+k] = o
		}
	}
}
