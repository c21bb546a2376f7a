// Package conf turns a TOML file, the environment and command-line flags into
// one validated, plain Config. Precedence is flag > environment > file >
// default. It does no I/O beyond reading the named file.
package conf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/supervisor/fileops"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// EnvPrefix starts every environment variable the daemon reads.
const EnvPrefix = "AGENT_CONTROL_PLANE_"

// MinLogMaxBytes is the smallest log cap accepted.
const MinLogMaxBytes = 64 << 10

// DefaultListen is the daemon's loopback address.
const DefaultListen = "127.0.0.1:4025"

// Config is the daemon's whole configuration.
type Config struct {
	Listen           string
	AllowNonLoopback bool
	Root             string
	Ports            PortRange

	// NativeCommand is the child argv; empty means the bundled stub agent.
	NativeCommand  []string
	ReadyPath      string        // readiness probe path on the child
	StartupTimeout time.Duration // starting → stopped if not ready by then
	StopGrace      time.Duration // SIGTERM → SIGKILL

	ReapInterval time.Duration // auto-stop and auto-delete sweep period
	ReapOnExit   bool          // stop children when the daemon exits (tests)
	AutoStop     time.Duration // default idle interval; 0 disables
	MaxLifetime  time.Duration // hard cap on a sandbox's life; 0 is off

	EventBuffer    int           // events kept for Last-Event-ID replay
	EventHeartbeat time.Duration // SSE comment period on idle streams

	EnvForward []string // model-auth keys merged into standalone sandboxes
	// EnvForwardUnless: request keys that mark a sandbox as a harness's,
	// which brings its own credentials: nothing is forwarded to it.
	EnvForwardUnless []string
	EnvFile          string // KEY=VALUE file read for EnvForward keys

	LogFormat string // text or json
	LogLevel  string // debug, info, warn, error

	// Token is the API's bearer token when given in the environment; a
	// secret, never logged. Empty: the token file.
	Token string
	// TokenFile holds the token when Token is empty; created (0600) if
	// missing.
	TokenFile string
	// MetricsAuth makes /metrics require the token too.
	MetricsAuth bool

	// LogMaxBytes caps each sandbox's stdout and stderr on disk.
	LogMaxBytes int64
	// MaxUploadBytes bounds one file upload into a sandbox (the toolbox).
	MaxUploadBytes int64

	BodyTimeout    time.Duration // reading one request body
	MaxConnections int           // open at once; more wait in the backlog

	// Cgroups is "auto" (contain native sandboxes in cgroups where the
	// machine allows) or "off" (process groups only).
	Cgroups string
	// Isolation is "auto" (native sandboxes in namespaces of their own
	// where the kernel lets this user make them), "namespaces" (or the
	// daemon does not start) or "off" (processes on the host).
	Isolation string
	// Limits are the resource limits of sandboxes whose create gives
	// none; zero fields: no limit.
	Limits runtime.Resources
	// LimitsUnsupported says what a limit the machine cannot enforce
	// does: "refuse" the create (400 limits_unsupported) or "ignore" it.
	LimitsUnsupported string

	Docker Docker

	// Snapshots are the [snapshots.NAME] tables, by name; the one named
	// default comes from [native] when the file defines none.
	Snapshots map[string]snapshot.Snapshot

	// File is the config file read, or "" when none was.
	File string
	// Origins says where each setting not left at its default came from,
	// by key (see Setting.Origin).
	Origins map[string]string
}

// Docker configures the docker runtime.
type Docker struct {
	// Host is the engine's address; empty: $DOCKER_HOST, else the
	// default socket.
	Host string
	// Image runs when a create names no snapshot; empty: such creates
	// are refused.
	Image string
	Port  int  // the agent-server's port inside the container
	Pull  bool // pull a missing image instead of refusing the create
	// Rewrite lists the variables whose loopback URLs are pointed at
	// host.docker.internal.
	Rewrite []string
}

// PortRange is an inclusive range of TCP ports.
type PortRange struct{ Lo, Hi int }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// Size is the number of ports in the range.
func (r PortRange) Size() int { return r.Hi - r.Lo + 1 }

// ParsePortRange parses "LO-HI".
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return PortRange{}, fmt.Errorf("port range %q: want LO-HI", s)
	}
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("port range %q: want LO-HI", s)
	}
	r := PortRange{l, h}
	if l < 1 || h > 65535 || l > h {
		return PortRange{}, fmt.Errorf("port range %q: want 1 <= LO <= HI <= 65535", s)
	}
	return r, nil
}

// DefaultEnvForward lists the model-provider keys forwarded by default.
var DefaultEnvForward = []string{
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
	"GOOGLE_GENERATIVE_AI_API_KEY", "OPENROUTER_API_KEY", "MISTRAL_API_KEY",
	"GROQ_API_KEY", "XAI_API_KEY", "DEEPSEEK_API_KEY",
}

// DefaultEnvForwardUnless lists the request keys that, by default, mark a
// sandbox as started by a harness with credentials of its own.
var DefaultEnvForwardUnless = []string{"GAMMA_AGENT_TOKEN", "HARNESS_SESSION_ID"}

// Default returns the configuration used when nothing else is said. getenv
// supplies HOME and XDG_STATE_HOME for the default root.
func Default(getenv func(string) string) Config {
	return Config{
		Listen:            DefaultListen,
		Root:              defaultRoot(getenv),
		Ports:             PortRange{4100, 4999},
		ReadyPath:         "/api/info",
		StartupTimeout:    60 * time.Second,
		StopGrace:         5 * time.Second,
		ReapInterval:      60 * time.Second,
		AutoStop:          15 * time.Minute,
		EventBuffer:       1024,
		EventHeartbeat:    15 * time.Second,
		EnvForward:        append([]string(nil), DefaultEnvForward...),
		EnvForwardUnless:  append([]string(nil), DefaultEnvForwardUnless...),
		LogFormat:         "text",
		LogLevel:          "info",
		TokenFile:         filepath.Join(auth.StateDir(getenv), "token"),
		LogMaxBytes:       10 << 20,
		MaxUploadBytes:    fileops.DefaultMaxUpload,
		BodyTimeout:       30 * time.Second,
		MaxConnections:    1024,
		Cgroups:           "auto",
		Isolation:         "auto",
		LimitsUnsupported: "refuse",
		Docker: Docker{Port: 4000, Rewrite: []string{
			"HOCUSPOCUS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
			"DATABASE_URL", "REDIS_URL", "API_URL", "APP_URL",
		}},
	}
}

// DefaultFile is where the config file is looked for when none is named:
// $XDG_CONFIG_HOME/agent-control-plane/config.toml, else under
// $HOME/.config; "" when neither variable is set.
func DefaultFile(getenv func(string) string) string {
	dir := getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(dir) { // the spec: a relative value is ignored
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "agent-control-plane", "config.toml")
}

func defaultRoot(getenv func(string) string) string {
	return filepath.Join(auth.StateDir(getenv), "sandboxes")
}

// Sources are the inputs to Load besides the defaults.
type Sources struct {
	// File is the TOML config path; empty means none (or the value of
	// AGENT_CONTROL_PLANE_CONFIG).
	File string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Flags holds the flags set on the command line by name: listen, root,
	// port-range, log-format.
	Flags map[string]string
}

// Load builds and validates the configuration. Its errors are one line each
// and name the source and key at fault.
func Load(src Sources) (Config, error) {
	getenv := src.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default(getenv)
	c.Origins = map[string]string{}
	path := src.File
	if path == "" {
		path = getenv(EnvPrefix + "CONFIG")
	}
	if path == "" {
		// The default location is read when it exists.
		if def := DefaultFile(getenv); def != "" {
			if _, err := os.Stat(def); err == nil {
				path = def
			}
		}
	}
	if path != "" {
		if err := c.applyFile(path); err != nil {
			return Config{}, err
		}
		c.File = path
	}
	for _, k := range keys {
		if k.env == "" {
			continue
		}
		name := EnvPrefix + k.env
		if v := getenv(name); v != "" {
			if err := k.parse(&c, v); err != nil {
				return Config{}, fmt.Errorf("environment %s: %w", name, err)
			}
			c.Origins[k.path] = "env " + name
		}
	}
	for _, k := range keys {
		if v, ok := src.Flags[k.flag]; ok && k.flag != "" {
			if err := k.parse(&c, v); err != nil {
				return Config{}, fmt.Errorf("flag --%s: %w", k.flag, err)
			}
			c.Origins[k.path] = "flag --" + k.flag
		}
	}
	if _, ok := c.Snapshots[snapshot.Default]; ok && len(c.NativeCommand) > 0 {
		return Config{}, fmt.Errorf("[snapshots.%s] and native.command both say what runs by default; keep one", snapshot.Default)
	}
	c.withDefaultSnapshot()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (use 1 or 0)", v)
}

func msSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
			return fmt.Errorf("%q is not a non-negative number of milliseconds", v)
		}
		*field(c) = time.Duration(n) * time.Millisecond
		return nil
	}
}

func minutesSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := ParseMinutes(v)
		*field(c) = d
		return err
	}
}

// ParseMinutes parses a non-negative, possibly fractional number of minutes.
func ParseMinutes(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) || f > 1e9 {
		return 0, fmt.Errorf("%q is not a non-negative number of minutes", v)
	}
	return time.Duration(f * float64(time.Minute)), nil
}

// Validate checks the whole configuration.
//
// It is long because it is every cross-key rule of the configuration in
// one place, each with its own message.
func (c *Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen %q: want HOST:PORT", c.Listen)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("listen %q: bad port", c.Listen)
	}
	if !c.AllowNonLoopback && !auth.IsLoopbackHost(host) {
		return fmt.Errorf("listen %q is not a loopback address; set allow_non_loopback = true in the config file to expose the daemon (its bearer token then travels unencrypted)", c.Listen)
	}
	if p >= c.Ports.Lo && p <= c.Ports.Hi {
		return fmt.Errorf("listen port %d lies inside the sandbox port range %s", p, c.Ports)
	}
	if c.Ports.Lo < 1 || c.Ports.Hi > 65535 || c.Ports.Lo > c.Ports.Hi {
		return fmt.Errorf("port range %s: want 1 <= LO <= HI <= 65535", c.Ports)
	}
	if c.Root == "" {
		return errors.New("root must not be empty")
	}
	if c.BodyTimeout <= 0 {
		return errors.New("body_timeout must be positive")
	}
	if c.MaxConnections < 16 || c.MaxConnections > 1<<20 {
		return fmt.Errorf("max_connections %d: want 16 to %d", c.MaxConnections, 1<<20)
	}
	if c.MaxUploadBytes < 1 {
		return fmt.Errorf("max_upload_bytes %d: want at least 1", c.MaxUploadBytes)
	}
	if c.LogMaxBytes < MinLogMaxBytes {
		return fmt.Errorf("log_max_bytes %d: want at least %d", c.LogMaxBytes, MinLogMaxBytes)
	}
	if c.TokenFile == "" && c.Token == "" {
		return errors.New("token_file must not be empty")
	}
	if !filepath.IsAbs(c.Root) {
		abs, err := filepath.Abs(c.Root)
		if err != nil {
			return fmt.Errorf("root %q: %w", c.Root, err)
		}
		c.Root = abs
	}
	if !strings.HasPrefix(c.ReadyPath, "/") {
		return fmt.Errorf("native.ready_path %q must start with /", c.ReadyPath)
	}
	if c.ReapInterval <= 0 {
		return errors.New("reap interval must be positive")
	}
	if c.StartupTimeout <= 0 {
		return errors.New("startup timeout must be positive")
	}
	if c.EventBuffer < 1 || c.EventBuffer > 1<<20 {
		return fmt.Errorf("events.buffer %d: want 1 to %d", c.EventBuffer, 1<<20)
	}
	if c.EventHeartbeat <= 0 {
		return errors.New("events.heartbeat must be positive")
	}
	for _, a := range c.NativeCommand {
		if a == "" {
			return errors.New("native.command has an empty argument")
		}
	}
	for key, names := range map[string][]string{"env.forward": c.EnvForward, "env.forward_unless": c.EnvForwardUnless} {
		for _, k := range names {
			if !runtime.ValidEnvName(k) {
				return fmt.Errorf("%s: %q is not a valid variable name", key, k)
			}
		}
	}
	if c.Docker.Port < 1 || c.Docker.Port > 65535 {
		return fmt.Errorf("docker.port %d: want 1 to 65535", c.Docker.Port)
	}
	for _, k := range c.Docker.Rewrite {
		if !runtime.ValidEnvName(k) {
			return fmt.Errorf("docker.rewrite_loopback: %q is not a valid variable name", k)
		}
	}
	switch c.Cgroups {
	case "auto", "off":
	default:
		return fmt.Errorf("cgroups %q: want auto or off", c.Cgroups)
	}
	switch c.Isolation {
	case "auto", "namespaces", "off":
	default:
		return fmt.Errorf("isolation %q: want auto, namespaces or off", c.Isolation)
	}
	switch c.LimitsUnsupported {
	case "refuse", "ignore":
	default:
		return fmt.Errorf("limits.unsupported %q: want refuse or ignore", c.LimitsUnsupported)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("log format %q: want text or json", c.LogFormat)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// InstanceName names the daemon that owns root among others on the
// machine: its cgroup subtree and the label on its containers. Two daemons
// with different roots never share one.
func InstanceName(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "agent-control-plane-" + hex.EncodeToString(sum[:6])
}

// ReadEnvFile reads KEY=VALUE lines (blank lines and # comments skipped,
// optional "export " prefix and surrounding quotes removed).
func ReadEnvFile(path string) (map[string]string, error) {
	b, err := readRegular(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !runtime.ValidEnvName(k) {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE", path, i+1)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	return out, nil
}

// maxFileBytes bounds a configuration or env file.
const maxFileBytes = 1 << 20

// readRegular reads a file the daemon is pointed at, refusing anything
// but a regular file: it is opened non-blocking, so that a FIFO in its
// place (or a device) can neither wedge a start nor a reload on SIGHUP.
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	return b, nil
}
