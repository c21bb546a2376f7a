package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
)

// key is one configuration key, declared once: where it is set (its path
// in the file, its environment variable, its serve flag), whether SIGHUP
// applies it, how its value in force is shown (config, Diff) and how a
// variable's or a flag's text is read. Settings, the environment and the
// flags derive from this table; the file's shape (fileConfig) is checked
// against it by a test; per-snapshot keys are the snapshots' own.
type key struct {
	path string // in the file: "listen", "docker.image"
	// file: the file has the key (false: the environment only).
	file bool
	env  string // the variable after EnvPrefix, or ""
	flag string // serve's flag, or ""
	// usage is the flag's help text (a `name` in it names its argument).
	usage string
	// reload: SIGHUP applies a change (the rest need a restart).
	reload bool
	// secret: its value is never shown; Diff still sees it change.
	secret bool
	show   func(c *Config) any                // the value in force, as TOML writes it
	parse  func(c *Config, text string) error // a variable's or a flag's text; nil: neither
}

// str is a parse for a string field.
func str(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

var keys = []key{
	{path: "listen", file: true, env: "LISTEN", flag: "listen", usage: "listen `address` (loopback only unless the config allows otherwise)", show: func(c *Config) any { return c.Listen }, parse: str(func(c *Config) *string { return &c.Listen })},
	{path: "allow_non_loopback", file: true, show: func(c *Config) any { return c.AllowNonLoopback }},
	{path: "root", file: true, env: "ROOT", flag: "root", usage: "sandbox root `dir`", show: func(c *Config) any { return c.Root }, parse: str(func(c *Config) *string { return &c.Root })},
	{path: "port_range", file: true, env: "PORT_RANGE", flag: "port-range", usage: "sandbox port `range` LO-HI", show: func(c *Config) any { return c.Ports.String() },
		parse: func(c *Config, v string) (err error) { c.Ports, err = ParsePortRange(v); return }},
	{path: "stop_grace", file: true, env: "STOP_GRACE_MS", show: func(c *Config) any { return c.StopGrace }, parse: msSetter(func(c *Config) *time.Duration { return &c.StopGrace })},
	{path: "startup_timeout", file: true, env: "STARTUP_TIMEOUT_MS", show: func(c *Config) any { return c.StartupTimeout }, parse: msSetter(func(c *Config) *time.Duration { return &c.StartupTimeout })},
	{path: "reap_interval", file: true, env: "REAP_INTERVAL_MS", show: func(c *Config) any { return c.ReapInterval }, parse: msSetter(func(c *Config) *time.Duration { return &c.ReapInterval })},
	{path: "reap_on_exit", env: "REAP_ON_EXIT", show: func(c *Config) any { return c.ReapOnExit },
		parse: func(c *Config, v string) (err error) { c.ReapOnExit, err = parseBool(v); return }},
	{path: "autostop_minutes", file: true, env: "AUTOSTOP_MINUTES", reload: true, show: func(c *Config) any { return c.AutoStop.Minutes() }, parse: minutesSetter(func(c *Config) *time.Duration { return &c.AutoStop })},
	{path: "max_lifetime", file: true, env: "MAX_LIFETIME_MINUTES", reload: true, show: func(c *Config) any { return c.MaxLifetime }, parse: minutesSetter(func(c *Config) *time.Duration { return &c.MaxLifetime })},
	{path: "log_format", file: true, env: "LOG_FORMAT", flag: "log-format", usage: "log format: text or json", show: func(c *Config) any { return c.LogFormat }, parse: str(func(c *Config) *string { return &c.LogFormat })},
	{path: "log_level", file: true, env: "LOG_LEVEL", reload: true, show: func(c *Config) any { return c.LogLevel }, parse: str(func(c *Config) *string { return &c.LogLevel })},
	{path: "token", env: "TOKEN", reload: true, secret: true, show: func(c *Config) any { return c.Token },
		parse: func(c *Config, v string) error { c.Token = strings.TrimSpace(v); return auth.Validate(c.Token) }},
	{path: "token_file", file: true, env: "TOKEN_FILE", reload: true, show: func(c *Config) any { return c.TokenFile }, parse: str(func(c *Config) *string { return &c.TokenFile })},
	{path: "metrics_auth", file: true, show: func(c *Config) any { return c.MetricsAuth }},
	{path: "log_max_bytes", file: true, env: "LOG_MAX_BYTES", show: func(c *Config) any { return c.LogMaxBytes },
		parse: func(c *Config, v string) (err error) { c.LogMaxBytes, err = strconv.ParseInt(v, 10, 64); return }},
	{path: "max_upload_bytes", file: true, env: "MAX_UPLOAD_BYTES", show: func(c *Config) any { return c.MaxUploadBytes },
		parse: func(c *Config, v string) (err error) { c.MaxUploadBytes, err = strconv.ParseInt(v, 10, 64); return }},
	{path: "body_timeout", file: true, env: "BODY_TIMEOUT_MS", show: func(c *Config) any { return c.BodyTimeout }, parse: msSetter(func(c *Config) *time.Duration { return &c.BodyTimeout })},
	{path: "max_connections", file: true, env: "MAX_CONNECTIONS", show: func(c *Config) any { return c.MaxConnections },
		parse: func(c *Config, v string) (err error) { c.MaxConnections, err = strconv.Atoi(v); return }},
	{path: "isolation", file: true, env: "ISOLATION", show: func(c *Config) any { return c.Isolation }, parse: str(func(c *Config) *string { return &c.Isolation })},
	{path: "cgroups", file: true, env: "CGROUPS", show: func(c *Config) any { return c.Cgroups }, parse: str(func(c *Config) *string { return &c.Cgroups })},
	{path: "limits.cpu", file: true, show: func(c *Config) any { return limits.CPUs(c.Limits.MilliCPU) }},
	{path: "limits.memory", file: true, show: func(c *Config) any { return limits.InGiB(c.Limits.MemoryBytes) }},
	{path: "limits.pids", file: true, show: func(c *Config) any { return c.Limits.Pids }},
	{path: "limits.unsupported", file: true, show: func(c *Config) any { return c.LimitsUnsupported }},
	{path: "native.command", file: true, env: "NATIVE_COMMAND", reload: true, show: func(c *Config) any { return c.NativeCommand },
		parse: func(c *Config, v string) error {
			var argv []string
			if err := json.Unmarshal([]byte(v), &argv); err != nil {
				return errors.New(`want a JSON array of strings, e.g. ["my-agent","--flag"]`)
			}
			c.NativeCommand = argv
			return nil
		}},
	{path: "native.ready_path", file: true, show: func(c *Config) any { return c.ReadyPath }},
	{path: "events.buffer", file: true, show: func(c *Config) any { return c.EventBuffer }},
	{path: "events.heartbeat", file: true, show: func(c *Config) any { return c.EventHeartbeat }},
	{path: "env.forward", file: true, show: func(c *Config) any { return c.EnvForward }},
	{path: "env.forward_unless", file: true, show: func(c *Config) any { return c.EnvForwardUnless }},
	{path: "env.file", file: true, show: func(c *Config) any { return c.EnvFile }},
	{path: "docker.host", file: true, show: func(c *Config) any { return c.Docker.Host }},
	{path: "docker.image", file: true, show: func(c *Config) any { return c.Docker.Image }},
	{path: "docker.port", file: true, show: func(c *Config) any { return c.Docker.Port }},
	{path: "docker.pull", file: true, show: func(c *Config) any { return c.Docker.Pull }},
	{path: "docker.rewrite_loopback", file: true, show: func(c *Config) any { return c.Docker.Rewrite }},
}

// Reloadable reports whether SIGHUP applies a change of the setting
// named key (a snapshot's keys all reload).
func Reloadable(key string) bool {
	if strings.HasPrefix(key, "snapshots.") {
		return true
	}
	for _, k := range keys {
		if k.path == key {
			return k.reload
		}
	}
	return false
}

// EnvVars lists every environment variable Load reads, for documentation and
// tests.
func EnvVars() []string {
	names := []string{EnvPrefix + "CONFIG"}
	for _, k := range keys {
		if k.env != "" {
			names = append(names, EnvPrefix+k.env)
		}
	}
	return names
}

// ServiceEnv sorts the daemon's variables set in getenv for a service
// unit: carry holds KEY=VALUE for each to write into the unit (all but
// the listen address, which is the socket unit's, and secrets), left
// the name of each secret set, which a unit file (world-readable) must
// not hold.
func ServiceEnv(getenv func(string) string) (carry, left []string) {
	if v := getenv(EnvPrefix + "CONFIG"); v != "" {
		carry = append(carry, EnvPrefix+"CONFIG="+v)
	}
	for _, k := range keys {
		v := getenv(EnvPrefix + k.env)
		switch {
		case k.env == "" || v == "" || k.path == "listen":
		case k.secret:
			left = append(left, EnvPrefix+k.env)
		default:
			carry = append(carry, EnvPrefix+k.env+"="+v)
		}
	}
	return carry, left
}

// Flag is a command-line flag that sets a key.
type Flag struct {
	Name, Usage string
	Default     string // in def, as the flag takes it
}

// Flags lists the flags that set a key, with their defaults in def.
func Flags(def Config) []Flag {
	var out []Flag
	for _, k := range keys {
		if k.flag != "" {
			out = append(out, Flag{Name: k.flag, Usage: k.usage, Default: fmt.Sprint(k.show(&def))})
		}
	}
	return out
}
