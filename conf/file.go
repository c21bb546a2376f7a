package conf

import (
	"fmt"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// fileConfig is the TOML file's shape. Pointers tell "absent" from zero.
type fileConfig struct {
	Listen           *string   `toml:"listen"`
	AllowNonLoopback *bool     `toml:"allow_non_loopback"`
	Root             *string   `toml:"root"`
	PortRange        *string   `toml:"port_range"`
	StopGrace        *duration `toml:"stop_grace"`
	StartupTimeout   *duration `toml:"startup_timeout"`
	ReapInterval     *duration `toml:"reap_interval"`
	AutoStopMinutes  *float64  `toml:"autostop_minutes"`
	MaxLifetime      *duration `toml:"max_lifetime"`
	LogFormat        *string   `toml:"log_format"`
	LogLevel         *string   `toml:"log_level"`
	TokenFile        *string   `toml:"token_file"`
	MetricsAuth      *bool     `toml:"metrics_auth"`
	LogMaxBytes      *int64    `toml:"log_max_bytes"`
	MaxUploadBytes   *int64    `toml:"max_upload_bytes"`
	BodyTimeout      *duration `toml:"body_timeout"`
	MaxConnections   *int      `toml:"max_connections"`
	Cgroups          *string   `toml:"cgroups"`
	Isolation        *string   `toml:"isolation"`
	Limits           struct {
		CPU         *float64 `toml:"cpu"`
		Memory      *float64 `toml:"memory"`
		Pids        *int64   `toml:"pids"`
		Unsupported *string  `toml:"unsupported"`
	} `toml:"limits"`
	Docker struct {
		Host    *string  `toml:"host"`
		Image   *string  `toml:"image"`
		Port    *int     `toml:"port"`
		Pull    *bool    `toml:"pull"`
		Rewrite []string `toml:"rewrite_loopback"`
	} `toml:"docker"`
	Snapshots map[string]snapshotFile `toml:"snapshots"`
	Native    struct {
		Command   []string `toml:"command"`
		ReadyPath *string  `toml:"ready_path"`
	} `toml:"native"`
	Events struct {
		Buffer    *int      `toml:"buffer"`
		Heartbeat *duration `toml:"heartbeat"`
	} `toml:"events"`
	Env struct {
		Forward       []string `toml:"forward"`
		ForwardUnless []string `toml:"forward_unless"`
		File          *string  `toml:"file"`
	} `toml:"env"`
}

// duration is a TOML string such as "5s" or "1m30s".
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("%s is negative", b)
	}
	d.Duration = v
	return nil
}

// applyFile sets what the file at path gives over c.
//
// It is long because it is one assignment per key of the file, in the
// file's order.
func (c *Config) applyFile(path string) error {
	var f fileConfig
	b, err := readRegular(path)
	if err != nil {
		return fmt.Errorf("config %s: %v", path, err)
	}
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return fmt.Errorf("config %s: %v", path, oneLine(err))
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	for _, k := range md.Keys() {
		c.Origins[k.String()] = "file"
	}
	set(&c.Listen, f.Listen)
	set(&c.AllowNonLoopback, f.AllowNonLoopback)
	set(&c.Root, f.Root)
	if f.PortRange != nil {
		r, err := ParsePortRange(*f.PortRange)
		if err != nil {
			return fmt.Errorf("config %s: port_range: %w", path, err)
		}
		c.Ports = r
	}
	setDur(&c.StopGrace, f.StopGrace)
	setDur(&c.StartupTimeout, f.StartupTimeout)
	setDur(&c.ReapInterval, f.ReapInterval)
	setDur(&c.MaxLifetime, f.MaxLifetime)
	if f.AutoStopMinutes != nil {
		d, err := ParseMinutes(fmt.Sprint(*f.AutoStopMinutes))
		if err != nil {
			return fmt.Errorf("config %s: autostop_minutes: %w", path, err)
		}
		c.AutoStop = d
	}
	set(&c.LogFormat, f.LogFormat)
	set(&c.LogLevel, f.LogLevel)
	set(&c.TokenFile, f.TokenFile)
	set(&c.MetricsAuth, f.MetricsAuth)
	set(&c.LogMaxBytes, f.LogMaxBytes)
	set(&c.MaxUploadBytes, f.MaxUploadBytes)
	setDur(&c.BodyTimeout, f.BodyTimeout)
	set(&c.MaxConnections, f.MaxConnections)
	if f.Native.Command != nil {
		c.NativeCommand = f.Native.Command
	}
	set(&c.ReadyPath, f.Native.ReadyPath)
	set(&c.EventBuffer, f.Events.Buffer)
	setDur(&c.EventHeartbeat, f.Events.Heartbeat)
	if f.Env.Forward != nil {
		c.EnvForward = f.Env.Forward
	}
	if f.Env.ForwardUnless != nil {
		c.EnvForwardUnless = f.Env.ForwardUnless
	}
	set(&c.EnvFile, f.Env.File)
	set(&c.Cgroups, f.Cgroups)
	set(&c.Isolation, f.Isolation)
	set(&c.Docker.Host, f.Docker.Host)
	set(&c.Docker.Image, f.Docker.Image)
	set(&c.Docker.Port, f.Docker.Port)
	set(&c.Docker.Pull, f.Docker.Pull)
	if f.Docker.Rewrite != nil {
		c.Docker.Rewrite = f.Docker.Rewrite
	}
	for name, p := range f.Snapshots {
		if c.Snapshots == nil {
			c.Snapshots = map[string]snapshot.Snapshot{}
		}
		c.Snapshots[name] = p.snapshot(name)
	}
	set(&c.LimitsUnsupported, f.Limits.Unsupported)
	r, err := fileLimits(c.Limits, f.Limits.CPU, f.Limits.Memory, f.Limits.Pids)
	if err != nil {
		return fmt.Errorf("config %s: %s", path, limitKeys.Render(err))
	}
	c.Limits = r
	return nil
}

// limitKeys are the configuration's names of the limits.
var limitKeys = field.Names{field.CPU: "limits.cpu", field.Memory: "limits.memory", field.Pids: "limits.pids"}

// fileLimits is base with the limits the file sets (CPUs and GiB, as
// people write them), checked.
func fileLimits(base runtime.Resources, cpus, gib *float64, pids *int64) (runtime.Resources, error) {
	milli, bytes, err := limits.FromUnits(cpus, gib)
	if err != nil {
		return base, err
	}
	set(&base.MilliCPU, milli)
	set(&base.MemoryBytes, bytes)
	set(&base.Pids, pids)
	return limits.Check(base)
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func setDur(dst *time.Duration, v *duration) {
	if v != nil {
		*dst = v.Duration
	}
}

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
