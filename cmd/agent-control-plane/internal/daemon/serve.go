// Package daemon is the daemon's start-up: it reads no command line (the
// CLI's serve command does), wires the configured runtimes into a
// supervisor (the only place that names one), serves the API, tells
// systemd, reloads on SIGHUP and shuts down on SIGTERM.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	dockerclient "github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agent-control-plane/agent-control-plane/api"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
)

// baseEnvKeys are passed from the daemon to every child: what a program
// needs to run, and nothing secret.
var baseEnvKeys = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

func newLogger(cfg conf.Config, level *slog.LevelVar, w io.Writer) *slog.Logger {
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if w == os.Stderr && journalStderr() {
		// The journal stamps every line itself.
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Serve runs the daemon until SIGINT or SIGTERM; SIGHUP reloads what can
// be changed safely (see reload). version is the daemon's, as /v1/info
// shows it.
func Serve(cfg conf.Config, src conf.Sources, logw io.Writer, version string) error {
	level := new(slog.LevelVar)
	log := newLogger(cfg, level, logw)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP is caught from the start, so that a hangup (the terminal
	// closing, a reload sent early) never ends the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	token, tokenSource, err := auth.Load(cfg.Token, cfg.TokenFile)
	if err != nil {
		return err
	}

	ln, err := apiListener(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()

	watcher, err := proc.NewWatcher()
	if err != nil {
		return err
	}
	defer watcher.Close()
	forward, err := forwardEnv(cfg)
	if err != nil {
		return err
	}
	cgroups, cgInfo := cgroup.Detect(cgroup.Options{Name: conf.InstanceName(cfg.Root), Off: cfg.Cgroups == "off", Log: log})
	defer cgroups.Close()
	runtimes, isolationMode, closeRuntimes, err := newRuntimes(cfg, log, watcher, cgroups)
	if err != nil {
		return err
	}
	defer closeRuntimes()
	sup, err := newSupervisor(ctx, cfg, runtimes, forward, log)
	if err != nil {
		return err
	}
	// The root is this daemon's (the supervisor holds its lock): its
	// cgroup subtree is too.
	logCgroups(log, cgroups, cgInfo, cfg.Limits)
	defer cgroups.Prune()
	srv, err := newServer(cfg, sup, token, cgInfo, isolationMode, version, log)
	if err != nil {
		sup.Close(context.Background())
		return err
	}
	// Rehydration leaves its garbage (every record read and decoded, the
	// adopted children verified): collected now, before the API answers,
	// rather than by a cycle that starts as it does and takes a CPU from
	// the first exits reported after a restart (a kill 3 ms after /v1/info
	// answered was reported in 5–8 ms beside that cycle, 2.4–3.4 ms with
	// it done first: BENCHMARKS.md, fifth part).
	goruntime.GC()
	tokenAttrs := []any{"tokenSource", string(tokenSource)}
	if tokenSource != auth.FromEnv {
		tokenAttrs = append(tokenAttrs, "tokenFile", cfg.TokenFile)
	}
	log.Info("agent-control-plane serving", append([]any{"version", version, "listen", "http://" + ln.Addr().String(), "root", sup.Root(), "portRange", cfg.Ports.String(), "pid", os.Getpid()}, tokenAttrs...)...)
	reloads := reloadOnHangup(ctx, hup, cfg, func(cur conf.Config) conf.Config { return reload(log, cur, src, level, sup, srv) })
	go sup.RunChecks(ctx)
	// The supervisor has rehydrated and the listener is bound, so
	// connections queue until Run accepts them: the API answers.
	defer publishAddress(cfg.TokenFile, "http://"+ln.Addr().String(), log)()
	sd := notifier{log}
	go sd.ready(ctx, sup)
	context.AfterFunc(ctx, sd.stopping) // at SIGTERM, before the shutdown's wait
	err = srv.Run(ctx, ln)
	stop()
	cfg = <-reloads
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.StopGrace+30*time.Second)
	defer cancel()
	sup.Close(closeCtx)
	log.Info("agent-control-plane stopped", "reapedChildren", cfg.ReapOnExit)
	return err
}

// reloadOnHangup calls reload with the configuration in force at each
// SIGHUP until ctx ends, and then sends the configuration in force on the
// channel it returns.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, cfg conf.Config, reload func(conf.Config) conf.Config) <-chan conf.Config {
	out := make(chan conf.Config, 1)
	go func() {
		defer func() { out <- cfg }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				cfg = reload(cfg)
			}
		}
	}()
	return out
}

// apiListener is the API's listener: the one passed by socket activation,
// which keeps the port open across restarts, or the address bound now.
func apiListener(cfg conf.Config) (net.Listener, error) {
	ln, err := passedListener(cfg)
	if err != nil || ln != nil {
		return ln, err
	}
	return listen(cfg.Listen)
}

// newSupervisor is the supervisor of cfg's root over runtimes, giving
// standalone sandboxes the forwarded credentials.
func newSupervisor(ctx context.Context, cfg conf.Config, runtimes *runtime.Registry, forward map[string]string, log *slog.Logger) (*supervisor.Supervisor, error) {
	return supervisor.New(ctx, supervisor.Options{
		Root: cfg.Root, PortLo: cfg.Ports.Lo, PortHi: cfg.Ports.Hi,
		Runtimes: runtimes, Snapshots: slices.Collect(maps.Values(cfg.Snapshots)),
		ReadyPath: cfg.ReadyPath, StartupTimeout: cfg.StartupTimeout, StopGrace: cfg.StopGrace,
		CheckInterval: cfg.ReapInterval, AutoStop: cfg.AutoStop, MaxLifetime: cfg.MaxLifetime,
		EventBuffer: cfg.EventBuffer, StopOnClose: cfg.ReapOnExit, LogMaxBytes: cfg.LogMaxBytes,
		Limits: cfg.Limits, IgnoreUnsupportedLimits: cfg.LimitsUnsupported == "ignore",
		Env: childenv.Policy{Base: baseEnv(), Forward: forward, ForwardUnless: cfg.EnvForwardUnless},
		// A burst leaves its garbage and spent stacks in the heap, which
		// the runtime would return to the OS over minutes: return it now.
		OnQuiet: releaseAfterBursts(),
		Logger:  log,
	})
}

// newRuntimes registers every runtime this daemon offers: here, and
// only here. isolation is the native runtime's mode in force;
// closeRuntimes releases what they hold.
func newRuntimes(cfg conf.Config, log *slog.Logger, watcher *proc.Watcher, cgroups *cgroup.Manager) (_ *runtime.Registry, isolationMode string, closeRuntimes func(), err error) {
	argv := cfg.NativeCommand
	if len(argv) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, "", nil, fmt.Errorf("find own executable for the stub agent: %w", err)
		}
		argv = []string{self, "stub-agent"}
	}
	iso, refused, err := isolation(cfg, log)
	if err != nil {
		return nil, "", nil, err
	}
	nativeRT := &native.Runtime{Watcher: watcher, Argv: argv, Cgroups: cgroups, Isolation: iso}
	nativeRT.SetIsolationRefused(refused)
	runtimes := &runtime.Registry{}
	if err := runtimes.Register("native", nativeRT); err != nil {
		return nil, "", nil, err
	}
	dockerRT, err := newDocker(cfg, log)
	if err != nil {
		return nil, "", nil, err
	}
	if err := runtimes.Register("docker", dockerRT); err != nil {
		dockerRT.Close()
		return nil, "", nil, err
	}
	return runtimes, iso.Default, dockerRT.Close, nil
}

// newServer is the API over sup as cfg configures it, with its metrics
// registry (the Go runtime's and the process's collectors beside the
// daemon's own).
func newServer(cfg conf.Config, sup *supervisor.Supervisor, token string, cgInfo cgroup.Info, isolation, version string, log *slog.Logger) (*api.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var allow []string
	if host, _, _ := net.SplitHostPort(cfg.Listen); !auth.IsLoopbackHost(host) {
		allow = append(allow, host)
	}
	return api.New(sup, api.Options{Daytona: sup, Version: version, Logger: log, Registry: reg, Heartbeat: cfg.EventHeartbeat, AllowHosts: allow,
		Token: token, MetricsAuth: cfg.MetricsAuth, BodyTimeout: cfg.BodyTimeout, MaxConns: cfg.MaxConnections, MaxUpload: cfg.MaxUploadBytes,
		ReadyPath: cfg.ReadyPath, StartupTimeout: cfg.StartupTimeout, StopGrace: cfg.StopGrace,
		SignIns: sup, Isolation: isolation,
		Cgroups: &wire.Cgroups{Mode: string(cgInfo.Mode), Path: cgInfo.Path, Limits: append([]string{}, cgInfo.Limits...), Note: cgInfo.Note}})
}

// reload applies SIGHUP: it reads the configuration again and changes
// what can be changed without a restart: the log level, the auto-stop
// default and the maximum lifetime, the API token (re-read from its file,
// so that a rotated token takes effect) and the snapshots. Everything else is logged
// as needing a restart. A configuration that no longer loads changes
// nothing. It returns the configuration now in force.
func reload(log *slog.Logger, cur conf.Config, src conf.Sources, level *slog.LevelVar, sup *supervisor.Supervisor, srv *api.Server) conf.Config {
	next, err := conf.Load(src)
	if err != nil {
		log.Error("reload on SIGHUP failed; the running configuration stays", "err", err)
		return cur
	}
	token, _, err := auth.Load(next.Token, next.TokenFile)
	if err == nil {
		err = srv.SetToken(token)
	}
	if err != nil {
		log.Error("reload on SIGHUP: the token could not be read; the current one stays", "err", err)
	}
	_ = level.UnmarshalText([]byte(next.LogLevel))
	sup.SetDefaults(next.AutoStop, next.MaxLifetime)
	applied := cur
	applied.LogLevel, applied.AutoStop, applied.MaxLifetime = next.LogLevel, next.AutoStop, next.MaxLifetime
	applied.Token, applied.TokenFile = next.Token, next.TokenFile
	if err := sup.SetSnapshots(slices.Collect(maps.Values(next.Snapshots))); err != nil {
		log.Error("reload on SIGHUP: the snapshots stay as they were", "err", err)
	} else {
		// [native] command only describes the snapshot named default.
		applied.Snapshots, applied.NativeCommand = next.Snapshots, next.NativeCommand
	}
	if restart := slices.DeleteFunc(conf.Diff(cur, next), conf.Reloadable); len(restart) > 0 {
		log.Warn("reload on SIGHUP: these settings changed but need a restart", "keys", restart)
	}
	log.Info("configuration reloaded on SIGHUP", "logLevel", next.LogLevel, "autostop", next.AutoStop, "maxLifetime", next.MaxLifetime, "snapshots", len(applied.Snapshots))
	return applied
}

// listen binds the API address, and when it is taken says by whom.
//
// A daemon killed while it was forking a child leaves that child holding a
// copy of the listening socket until it execs (the socket is
// close-on-exec), a few milliseconds; so an address in use by something
// that does not answer as agent-control-plane is tried again for a few
// seconds before the daemon gives up.
func listen(addr string) (net.Listener, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		if info, ok := probeInfo(addr); ok {
			return nil, fmt.Errorf("listen on %s: another agent-control-plane (pid %d, root %s) is already serving there", addr, info.PID, info.Root)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("listen on %s: the address is in use by another program", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probeInfo asks addr for /v1/info and reports whether it is ours.
func probeInfo(addr string) (wire.Info, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/v1/info")
	if err != nil {
		return wire.Info{}, false
	}
	defer resp.Body.Close()
	var info wire.Info
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&info) != nil {
		return wire.Info{}, false
	}
	return info, info.Name == wire.Name
}

func baseEnv() map[string]string {
	env := map[string]string{}
	for _, k := range baseEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	maps.Copy(env, childenv.NonInteractive)
	return env
}

// forwardEnv collects the forwarded credentials: the env file's values,
// overridden by the daemon's own environment.
func forwardEnv(cfg conf.Config) (map[string]string, error) {
	out := map[string]string{}
	var file map[string]string
	if cfg.EnvFile != "" {
		var err error
		if file, err = conf.ReadEnvFile(cfg.EnvFile); err != nil {
			return nil, fmt.Errorf("env.file: %w", err)
		}
	}
	for _, k := range cfg.EnvForward {
		if v, ok := os.LookupEnv(k); ok && strings.TrimSpace(v) != "" {
			out[k] = v
		} else if v, ok := file[k]; ok && v != "" {
			out[k] = v
		}
	}
	return out, nil
}

// logCgroups says once what containment native sandboxes get, and which
// default limits they cannot.
func logCgroups(log *slog.Logger, cgroups *cgroup.Manager, info cgroup.Info, defaults runtime.Resources) {
	if info.Contained() {
		attrs := []any{"cgroups", string(info.Mode), "path", info.Path, "limits", strings.Join(info.Limits, ","), "kill", info.Kill}
		if info.Note != "" {
			attrs = append(attrs, "note", info.Note)
		}
		log.Info("sandboxes are contained in cgroups", attrs...)
	} else {
		log.Warn("sandboxes are contained by their process group only: a process that leaves it outlives its sandbox, and no limit can be enforced", "cgroups", string(info.Mode), "why", info.Note)
	}
	if err := cgroups.Supports(cgroup.Limits(defaults)); err != nil {
		log.Warn(`default limits this machine cannot enforce: native creates that take them are refused unless limits.unsupported = "ignore"`, "why", err.Error())
	}
}

// newDocker is the docker runtime for cfg. The engine is not asked
// anything yet: an engine that is down makes docker creates fail (503
// runtime_unavailable) and leaves the native runtime alone.
func newDocker(cfg conf.Config, log *slog.Logger) (*docker.Runtime, error) {
	opts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if cfg.Docker.Host != "" {
		opts = append(opts, dockerclient.WithHost(cfg.Docker.Host))
	}
	c, err := dockerclient.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker.host: %w", err)
	}
	return &docker.Runtime{
		Client: c, Host: c.DaemonHost(), Image: cfg.Docker.Image, Port: cfg.Docker.Port,
		Pull: cfg.Docker.Pull, Rewrite: cfg.Docker.Rewrite, Owner: conf.InstanceName(cfg.Root),
		LogMaxBytes: cfg.LogMaxBytes, Log: log.With("runtime", "docker"),
	}, nil
}
