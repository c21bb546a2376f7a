package conf

import "github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"

// snapshotFile is a [snapshots.NAME] table as written.
type snapshotFile struct {
	Runtime        *string           `toml:"runtime"`
	Command        []string          `toml:"command"`
	Image          *string           `toml:"image"`
	ReadyPath      *string           `toml:"ready_path"`
	Env            map[string]string `toml:"env"`
	StartupTimeout *duration         `toml:"startup_timeout"`
	StopGrace      *duration         `toml:"stop_grace"`
	Isolation      *string           `toml:"isolation"`
	Mounts         []snapshot.Mount  `toml:"mounts"`
}

// snapshot is the table named name. The daemon checks it against its
// runtimes when it starts or reloads (supervisor.New, SetSnapshots).
func (f snapshotFile) snapshot(name string) snapshot.Snapshot {
	p := snapshot.Snapshot{Name: name}
	set(&p.Runtime, f.Runtime)
	p.Command = f.Command
	set(&p.Image, f.Image)
	set(&p.ReadyPath, f.ReadyPath)
	p.Env = f.Env
	setDur(&p.StartupTimeout, f.StartupTimeout)
	set(&p.Isolation, f.Isolation)
	p.Mounts = f.Mounts
	if f.StopGrace != nil {
		g := f.StopGrace.Duration
		p.StopGrace = &g
	}
	return p
}

// withDefaultSnapshot adds the snapshot named default from the [native]
// table when the configuration defines none.
func (c *Config) withDefaultSnapshot() {
	const name = snapshot.Default
	if _, ok := c.Snapshots[name]; ok {
		return
	}
	if c.Snapshots == nil {
		c.Snapshots = map[string]snapshot.Snapshot{}
	}
	c.Snapshots[name] = snapshot.Snapshot{Name: name, Runtime: "native", Command: c.NativeCommand, ReadyPath: c.ReadyPath}
	for _, k := range []string{"command", "ready_path"} {
		if o, ok := c.Origins["native."+k]; ok {
			c.Origins["snapshots."+name+"."+k] = o
		}
	}
}
