// Package docker is the runtime that runs each sandbox as one container of
// the local Docker Engine, behind the same contract as the native runtime:
// the leased port published on 127.0.0.1 only, the workspace bind-mounted,
// exits seen through the engine's event stream, logs copied into the
// sandbox's log files so that the supervisor caps, redacts and serves
// them as it does a process's.
//
// It talks to the engine through github.com/docker/docker/client, the
// Engine SDK named in the design: it negotiates the API version down to
// what the engine speaks (Debian 12's Docker 20.10 speaks 1.41), where
// its successor module github.com/moby/moby/client is made for the newer
// engines. It is the only Docker dependency, and it never runs the docker
// command.
package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
)

// Labels on every container this runtime makes.
const (
	LabelOwner   = "dev.agent-control-plane.owner"   // the daemon (one per root)
	LabelSandbox = "dev.agent-control-plane.sandbox" // the sandbox id
	LabelMarker  = "dev.agent-control-plane.marker"  // the sandbox's marker
	// LabelSeal proves the container is this daemon's: the root's seal
	// of the marker, which no one without the root's secret can make.
	// Copied with the other labels into an image committed from the
	// container, it proves nothing for a container of another name.
	LabelSeal = "dev.agent-control-plane.seal"
)

// WorkspaceDir is where the sandbox's workspace is mounted in the
// container.
const WorkspaceDir = "/workspace"

// stateVersion: the handle state is a state as JSON.
const stateVersion = 1

type state struct {
	ID     string `json:"id"`
	Marker string `json:"marker"`
	// The published host port and the workspace on this machine; a
	// state from before they were recorded has neither (no endpoint,
	// no files).
	Port      int    `json:"port,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// The sandbox's log files, which the container's output is copied
	// to; a restarted daemon resumes the copy there.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// Runtime starts one container per sandbox. Set the fields, then use it;
// Close ends its event subscription.
type Runtime struct {
	Client *client.Client
	// Host is the engine address, named in errors.
	Host string
	// Image runs when a create names no snapshot.
	Image string
	// Port is the agent-server's port inside the container (PORT).
	Port int
	// Pull lets a create pull a missing image; otherwise it is refused.
	Pull bool
	// Rewrite lists the variables whose loopback URLs are rewritten to
	// host.docker.internal.
	Rewrite []string
	// Owner labels this daemon's containers: a value unique per root.
	Owner string
	// LogMaxBytes caps the engine's own copy of a container's output
	// (json-file max-size, two files).
	LogMaxBytes int64
	Log         *slog.Logger

	once    sync.Once
	mu      sync.Mutex
	handles map[string]*handle // by container id
	life    context.Context    // ends at Close
	cancel  context.CancelFunc
	watched sync.WaitGroup

	netMu    sync.Mutex
	netReady bool
}

var (
	_ runtime.Runtime     = (*Runtime)(nil)
	_ runtime.Limiter     = (*Runtime)(nil)
	_ runtime.Checker     = (*Runtime)(nil)
	_ runtime.Pruner      = (*Runtime)(nil)
	_ runtime.Resizer     = (*handle)(nil)
	_ runtime.Meter       = (*handle)(nil)
	_ runtime.LimitReader = (*handle)(nil)
	_ runtime.Execer      = (*handle)(nil)
	_ runtime.Files       = (*handle)(nil)
)

// Capabilities: a container publishes its port on the host's loopback,
// gets none of the host's base environment, runs images; exec through
// the engine, files in its bind-mounted workspace; limits.
// FilesAtRest are a stopped sandbox's workspace files (runtime.AtRest).
func (r *Runtime) FilesAtRest(dir string) runtime.Files {
	return workspace.Files{Host: dir, Seen: WorkspaceDir}
}

func (r *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{LocalPort: true, Exec: true, Terminal: true, Mounts: true, Files: true, Limits: true, Isolation: true, Images: true}
}

// Enforceable: the engine enforces cpu, memory and pids, a cpu limit up
// to the CPUs of its machine (this one: the engine is local).
func (r *Runtime) Enforceable(res runtime.Resources) (runtime.Resources, error) {
	if err := limits.OverMachine(res, "the docker engine"); err != nil {
		return runtime.Resources{}, err
	}
	return res, nil
}

// limitsErr: an engine that refuses a limit (its range differs from
// what Enforceable assumed) says why, as a refusal of the limit.
func (r *Runtime) limitsErr(what string, err error) error {
	if cerrdefs.IsInvalidArgument(err) {
		return fmt.Errorf("%w: the docker engine refuses: %v", runtime.ErrLimitsUnsupported, err)
	}
	return r.engineErr(what, err)
}

// Check pings the engine.
func (r *Runtime) Check(ctx context.Context) error {
	if _, err := r.Client.Ping(ctx); err != nil {
		return r.unavailable(err)
	}
	return nil
}

func (r *Runtime) unavailable(err error) error {
	return fmt.Errorf("%w: the docker engine at %s does not answer: %v", runtime.ErrUnavailable, r.Host, err)
}

// engineErr classifies an engine error: one that never reached the engine,
// or whose connection broke before the answer, is ErrUnavailable.
func (r *Runtime) engineErr(what string, err error) error {
	if client.IsErrConnectionFailed(err) || connectionLost(err) {
		return r.unavailable(err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// connectionLost: the connection to the engine broke mid-call.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Start creates and starts the container.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Handle, error) {
	if !spec.Network.IsZero() {
		return nil, fmt.Errorf("%w: networkBlockAll and networkAllowList: the docker runtime does not cut a container's network (its agent port is reached through it); use an isolated native sandbox", runtime.ErrNetworkUnsupported)
	}
	r.startWatch()
	ref := spec.Image
	if ref == "" {
		ref = r.Image
	}
	if ref == "" {
		return nil, fmt.Errorf("%w: the create names no image (snapshot) and the daemon has no default ([docker] image)", runtime.ErrImageNotFound)
	}
	cfg, host := r.config(ref, spec)
	h, err := r.create(ctx, spec, ref, cfg, host)
	if r.networkGone(err) {
		// Someone removed the daemon's network (docker network prune)
		// while it ran: it is made again, and the create tried once more.
		h, err = r.create(ctx, spec, ref, cfg, host)
	}
	if err != nil {
		return nil, err // not a nil *handle in a non-nil interface
	}
	return h, nil
}

// create makes and starts the container; on error nothing of it remains
// (or, with the engine away, its removal goes on in the background).
func (r *Runtime) create(ctx context.Context, spec runtime.Spec, ref string, cfg *container.Config, host *container.HostConfig) (*handle, error) {
	if err := r.ensureNetwork(ctx); err != nil {
		return nil, err
	}
	// The image is not inspected first: a create that finds none says so
	// (not found: the image is all a create refers to), and one round
	// trip is saved on every create.
	created, err := r.Client.ContainerCreate(ctx, cfg, host, nil, nil, containerName(spec.Marker))
	if client.IsErrNotFound(err) && !r.networkGone(err) {
		if err = r.missingImage(ctx, ref); err == nil {
			created, err = r.Client.ContainerCreate(ctx, cfg, host, nil, nil, containerName(spec.Marker))
		}
	}
	if err != nil {
		// The engine may have made the container before the answer was
		// lost (a connection cut mid-create): it goes, by the name
		// chosen before asking.
		r.removeLost(ctx, spec.Marker, spec.Seal)
		if errors.Is(err, runtime.ErrImageNotFound) || errors.Is(err, runtime.ErrUnavailable) || r.networkGone(err) {
			return nil, err
		}
		return nil, r.engineErr("create container", err)
	}
	h := r.track(state{ID: created.ID, Marker: spec.Marker, Stdout: spec.Stdout, Stderr: spec.Stderr, Port: spec.Port, Workspace: spec.Workspace})
	if err := r.Client.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		r.untrack(created.ID)
		r.removeLost(ctx, spec.Marker, spec.Seal)
		if r.networkGone(err) {
			return nil, err
		}
		return nil, r.engineErr("start container", err)
	}
	h.follow(time.Time{})
	return h, nil
}

// containerName is the sandbox's marker (its id, a dot, random hex): named
// after the sandbox, unique across daemons and restarts.
func containerName(marker string) string { return "acp-" + marker }

// missingImage pulls ref, which a create did not find, when allowed.
func (r *Runtime) missingImage(ctx context.Context, ref string) error {
	switch {
	case !r.Pull:
		return fmt.Errorf("%w: %q is not on this machine and the daemon does not pull ([docker] pull = false); build or load it first", runtime.ErrImageNotFound, ref)
	}
	rc, err := r.Client.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		if client.IsErrNotFound(err) {
			return fmt.Errorf("%w: %q: %v", runtime.ErrImageNotFound, ref, err)
		}
		return r.engineErr("pull image "+strconv.Quote(ref), err)
	}
	defer rc.Close()
	// The pull runs while its progress is read; its last message may be
	// an error.
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("pull image %q: %w", ref, err)
		}
		if m.Error != "" {
			return fmt.Errorf("%w: pull %q: %s", runtime.ErrImageNotFound, ref, m.Error)
		}
	}
}

// config is the container's configuration for spec.
func (r *Runtime) config(ref string, spec runtime.Spec) (*container.Config, *container.HostConfig) {
	port := nat.Port(strconv.Itoa(r.Port) + "/tcp")
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelOwner] = r.Owner
	labels[LabelSandbox] = spec.ID
	labels[LabelMarker] = spec.Marker
	labels[LabelSeal] = spec.Seal
	env := r.env(spec)
	cfg := &container.Config{
		Image:        ref,
		Env:          env,
		Labels:       labels,
		ExposedPorts: nat.PortSet{port: struct{}{}},
		WorkingDir:   WorkspaceDir,
	}
	if len(spec.Command) > 0 {
		// The whole argv, as for a native sandbox: the image's
		// entrypoint and command give way.
		cfg.Entrypoint = runtime.ExpandArgv(spec.Command, env)
	}
	logMax := max(r.LogMaxBytes, 1<<20)
	host := &container.HostConfig{
		PortBindings: nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(spec.Port)}}},
		// A mount, not a bind string: the engine refuses a source that
		// does not exist instead of creating it (a create whose answer
		// was lost must not leave a directory behind in the root).
		Mounts:        mounts(spec),
		NetworkMode:   container.NetworkMode(r.network()),
		ExtraHosts:    []string{"host.docker.internal:host-gateway"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": strconv.FormatInt(logMax, 10), "max-file": "2",
		}},
		Resources: resources(spec.Resources),
	}
	return cfg, host
}

// mounts are the workspace's bind mount and the volumes'.
func mounts(spec runtime.Spec) []mount.Mount {
	out := []mount.Mount{{Type: mount.TypeBind, Source: spec.Workspace, Target: WorkspaceDir}}
	for _, m := range spec.Mounts {
		out = append(out, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target})
	}
	return out
}

// resources maps limits to the engine's; zero lifts a limit.
func resources(res runtime.Resources) container.Resources {
	out := container.Resources{
		NanoCPUs: res.MilliCPU * 1e6,
		Memory:   res.MemoryBytes,
	}
	if res.MemoryBytes > 0 {
		out.MemorySwap = res.MemoryBytes // no swap: a hog is OOM-killed
	}
	pids := res.Pids
	if pids == 0 {
		pids = -1
	}
	out.PidsLimit = &pids
	return out
}

// env is the container's environment: the request's and the daemon's
// variables (the supervisor gives an isolated runtime no host base), with
// loopback URLs pointed at the host, and the sandbox's facts as the
// container sees them.
func (r *Runtime) env(spec runtime.Spec) []string {
	rewrite := map[string]bool{}
	for _, k := range r.Rewrite {
		rewrite[k] = true
	}
	vars := make([]string, 0, len(spec.Vars))
	for _, kv := range spec.Vars {
		k, v, _ := strings.Cut(kv, "=")
		if rewrite[k] {
			v = RewriteLoopback(v)
		}
		vars = append(vars, k+"="+v)
	}
	spec.Vars = vars
	return spec.Environ(map[string]string{
		runtime.EnvPort:      strconv.Itoa(r.Port),
		runtime.EnvHost:      "0.0.0.0",
		runtime.EnvWorkspace: WorkspaceDir,
	})
}

// RewriteLoopback points a URL at the host's loopback (localhost,
// 127.0.0.1, [::1]) to host.docker.internal instead, keeping the rest; any
// other value is returned as it is.
func RewriteLoopback(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return v
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		host := "host.docker.internal"
		if p := u.Port(); p != "" {
			host += ":" + p
		}
		u.Host = host
		return u.String()
	}
	return v
}

// Adopt re-attaches to a container of an earlier daemon. One that has
// exited comes back done, with its exit code, so Delete removes it.
func (r *Runtime) Adopt(ctx context.Context, st runtime.HandleState) (runtime.Handle, error) {
	r.startWatch()
	s, err := decode(st)
	if err != nil {
		return nil, err
	}
	info, err := r.Client.ContainerInspect(ctx, s.ID)
	switch {
	case client.IsErrNotFound(err):
		return nil, fmt.Errorf("%w: container %.12s", runtime.ErrGone, s.ID)
	case err != nil:
		return nil, r.engineErr("inspect container", err)
	}
	if info.Config == nil || info.Config.Labels[LabelOwner] != r.Owner || info.Config.Labels[LabelMarker] != s.Marker {
		return nil, fmt.Errorf("%w: container %.12s does not carry this sandbox's labels", runtime.ErrNotOurs, s.ID)
	}
	h := r.track(s)
	inForce := limitsOf(info)
	h.adopted = &inForce
	if info.State == nil || !info.State.Running {
		h.finish(exitOf(info))
		return h, nil
	}
	h.follow(loggedUntil(s.Stdout, s.Stderr))
	// It may have died between the inspect and the tracking.
	r.died(ctx, s.ID)
	return h, nil
}

func decode(st runtime.HandleState) (state, error) {
	var s state
	if st.Version != stateVersion {
		return s, fmt.Errorf("%w: docker handle version %d, want %d", runtime.ErrState, st.Version, stateVersion)
	}
	if err := json.Unmarshal(st.Data, &s); err != nil || s.ID == "" {
		return s, fmt.Errorf("%w: docker handle: %v", runtime.ErrState, err)
	}
	return s, nil
}

// ContainerID returns the container a docker handle's state names, for
// tools that read records.
func ContainerID(st runtime.HandleState) (string, error) {
	s, err := decode(st)
	return s.ID, err
}

// Close ends the event subscription and the log followers.
func (r *Runtime) Close() {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.watched.Wait()
	if cancel != nil {
		ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		r.removeNetwork(ctx)
	}
}

// exitOf reads how a container ended. The engine reports a process killed
// by signal N as exit code 128+N.
func exitOf(info container.InspectResponse) runtime.Exit {
	if info.State == nil {
		return runtime.Exit{Unknown: true}
	}
	e := exitFromCode(info.State.ExitCode)
	e.OOMKilled = info.State.OOMKilled
	if t, err := time.Parse(time.RFC3339Nano, info.State.FinishedAt); err == nil && t.Year() > 1 {
		e.At = t
	}
	return e
}
