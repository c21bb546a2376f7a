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
// CLI.
package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
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

// stateVersion: the handle state is {id, marker} as JSON.
const stateVersion = 1

type state struct {
	ID     string `json:"id"`
	Marker string `json:"marker"`
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
	_ runtime.Isolated    = (*Runtime)(nil)
	_ runtime.ImageRunner = (*Runtime)(nil)
	_ runtime.Checker     = (*Runtime)(nil)
	_ runtime.Pruner      = (*Runtime)(nil)
	_ runtime.Resizer     = (*handle)(nil)
	_ runtime.Meter       = (*handle)(nil)
	_ runtime.LimitReader = (*handle)(nil)
)

// Isolated: a container gets none of the host's base environment.
func (r *Runtime) Isolated() bool { return true }

// RunsImages: a create's snapshot that names no configured one is an
// image reference.
func (r *Runtime) RunsImages() bool { return true }

// Enforceable: the engine enforces cpu, memory and pids, a cpu limit up
// to the CPUs of its machine (this one: the engine is local).
func (r *Runtime) Enforceable(res runtime.Resources) (runtime.Resources, error) {
	if n := goruntime.NumCPU(); res.CPU > float64(n) {
		return runtime.Resources{}, fmt.Errorf("%w: cpu %g: the docker engine takes %g to %d CPUs (the CPUs of this machine)", runtime.ErrLimitsUnsupported, res.CPU, limits.MinCPU, n)
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
	h := r.track(created.ID, spec.Marker, spec.Stdout, spec.Stderr)
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
		Mounts:        []mount.Mount{{Type: mount.TypeBind, Source: spec.Workspace, Target: WorkspaceDir}},
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

// resources maps limits to the engine's; zero lifts a limit.
func resources(res runtime.Resources) container.Resources {
	out := container.Resources{
		NanoCPUs: int64(math.Round(res.CPU * 1e9)),
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
// the container's own port and workspace, and loopback URLs pointed at
// the host.
func (r *Runtime) env(spec runtime.Spec) []string {
	rewrite := map[string]bool{}
	for _, k := range r.Rewrite {
		rewrite[k] = true
	}
	own := map[string]string{
		"PORT":                strconv.Itoa(r.Port),
		"HOST":                "0.0.0.0",
		"AGENT_WORKSPACE_DIR": WorkspaceDir,
		runtime.MarkerEnv:     spec.Marker,
	}
	out := make([]string, 0, len(spec.Env)+len(own))
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		if _, mine := own[k]; mine {
			continue
		}
		if rewrite[k] {
			v = RewriteLoopback(v)
		}
		out = append(out, k+"="+v)
	}
	for k, v := range own {
		out = append(out, k+"="+v)
	}
	return out
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
func (r *Runtime) Adopt(ctx context.Context, st runtime.State) (runtime.Handle, error) {
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
	h := r.track(s.ID, s.Marker, s.Stdout, s.Stderr)
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

func decode(st runtime.State) (state, error) {
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
func ContainerID(st runtime.State) (string, error) {
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
	e := runtime.Exit{Code: info.State.ExitCode, OOMKilled: info.State.OOMKilled}
	if c := info.State.ExitCode; c > 128 && c < 128+65 {
		e.Signal = syscall.Signal(c - 128)
	}
	return e
}

// track registers a container whose end the event stream reports.
func (r *Runtime) track(id, marker, stdout, stderr string) *handle {
	h := &handle{r: r, id: id, marker: marker, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	r.mu.Lock()
	if r.handles == nil {
		r.handles = map[string]*handle{}
	}
	r.handles[id] = h
	r.mu.Unlock()
	return h
}

func (r *Runtime) untrack(id string) {
	r.mu.Lock()
	delete(r.handles, id)
	r.mu.Unlock()
}

// startWatch subscribes to the engine's container events once.
func (r *Runtime) startWatch() {
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		r.mu.Lock()
		r.life, r.cancel = ctx, cancel
		r.mu.Unlock()
		r.watched.Go(func() { r.watch(ctx) })
	})
}

// lifetime is a context that ends at Close.
func (r *Runtime) lifetime() context.Context {
	r.startWatch()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.life
}

// watch follows the engine's die events for this daemon's containers. A
// stream that drops is subscribed again from the time of the last event
// seen, so nothing is lost; each (re)subscription also inspects every
// tracked container, for what happened while there was none.
func (r *Runtime) watch(ctx context.Context) {
	since := time.Now()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		sub, cancel := context.WithCancel(ctx)
		msgs, errs := r.Client.Events(sub, events.ListOptions{
			Since: engineTime(since),
			Filters: filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)),
				filters.Arg("label", LabelOwner+"="+r.Owner),
				filters.Arg("event", string(events.ActionDie)), filters.Arg("event", string(events.ActionDestroy))),
		})
		r.reconcile(ctx)
	stream:
		for {
			select {
			case m := <-msgs:
				attempt = 0
				if m.TimeNano > 0 {
					since = time.Unix(0, m.TimeNano)
				}
				r.died(ctx, m.Actor.ID)
			case err := <-errs:
				if ctx.Err() == nil {
					r.Log.Warn("docker event stream dropped; subscribing again", "err", err)
				}
				break stream
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(probe.Reconnect.Delay(attempt)):
		}
	}
}

// died finishes the handle of a container that has stopped running.
func (r *Runtime) died(ctx context.Context, id string) {
	r.mu.Lock()
	h := r.handles[id]
	r.mu.Unlock()
	if h == nil {
		return
	}
	info, err := r.Client.ContainerInspect(ctx, id)
	switch {
	case client.IsErrNotFound(err):
		h.finish(runtime.Exit{Unknown: true})
	case err != nil:
		return // the next reconcile looks again
	case info.State == nil || !info.State.Running:
		h.finish(exitOf(info))
	}
}

// reconcile inspects every tracked container.
func (r *Runtime) reconcile(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.handles))
	for id := range r.handles {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.died(ctx, id)
	}
}

// handle is one container.
type handle struct {
	r              *Runtime
	id, marker     string
	stdout, stderr string
	// adopted: the limits in force when Adopt inspected the container.
	adopted *runtime.Resources

	once sync.Once
	done chan struct{}
	exit runtime.Exit

	mu       sync.Mutex
	unfollow context.CancelFunc
	followed sync.WaitGroup
}

func (h *handle) finish(e runtime.Exit) {
	h.once.Do(func() {
		h.exit = e
		close(h.done)
		h.r.untrack(h.id)
	})
}

func (h *handle) State() runtime.State {
	b, _ := json.Marshal(state{ID: h.id, Marker: h.marker, Stdout: h.stdout, Stderr: h.stderr})
	return runtime.State{Version: stateVersion, Data: b}
}

func (h *handle) Done() <-chan struct{} { return h.done }

func (h *handle) Exit() runtime.Exit {
	select {
	case <-h.done:
		return h.exit
	default:
		return runtime.Exit{Unknown: true}
	}
}

// Stop asks the engine to stop the container: SIGTERM, grace, SIGKILL.
func (h *handle) Stop(ctx context.Context, grace time.Duration) error {
	secs := int(math.Ceil(grace.Seconds()))
	err := h.r.Client.ContainerStop(ctx, h.id, container.StopOptions{Timeout: &secs})
	if err != nil && !client.IsErrNotFound(err) {
		return h.r.engineErr("stop container", err)
	}
	if client.IsErrNotFound(err) {
		h.finish(runtime.Exit{Unknown: true})
	}
	h.r.died(ctx, h.id) // the die event may lag the answer
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delete removes the container and stops copying its output.
func (h *handle) Delete(ctx context.Context) error {
	h.mu.Lock()
	if h.unfollow != nil {
		h.unfollow()
	}
	h.mu.Unlock()
	h.followed.Wait()
	h.r.untrack(h.id)
	err := h.r.Client.ContainerRemove(ctx, h.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !client.IsErrNotFound(err) {
		return h.r.engineErr("remove container", err)
	}
	return nil
}

// Resize applies new limits to the running container.
func (h *handle) Resize(ctx context.Context, res runtime.Resources) error {
	_, err := h.r.Client.ContainerUpdate(ctx, h.id, container.UpdateConfig{Resources: resources(res)})
	if err != nil {
		return h.r.limitsErr("update container", err)
	}
	return nil
}

// Limits reads the limits in force from the engine.
func (h *handle) Limits(ctx context.Context) (runtime.Resources, error) {
	if h.adopted != nil { // read by Adopt's inspect: no second round trip
		return *h.adopted, nil
	}
	info, err := h.r.Client.ContainerInspect(ctx, h.id)
	if err != nil {
		return runtime.Resources{}, h.r.engineErr("inspect container", err)
	}
	return limitsOf(info), nil
}

// limitsOf reads the limits in force from an inspect.
func limitsOf(info container.InspectResponse) runtime.Resources {
	var res runtime.Resources
	if hc := info.HostConfig; hc != nil {
		res.CPU = runtime.Resources{CPU: float64(hc.NanoCPUs) / 1e9}.Normalized().CPU
		res.MemoryBytes = hc.Memory
		if hc.PidsLimit != nil && *hc.PidsLimit > 0 {
			res.Pids = *hc.PidsLimit
		}
	}
	return res
}

// usageTimeout bounds one stats call: a read of a sandbox must not wait on
// a slow engine.
const usageTimeout = 2 * time.Second

// Usage asks the engine for the container's consumption (one-shot stats:
// no second sample is awaited).
func (h *handle) Usage() (runtime.Usage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
	defer cancel()
	rd, err := h.r.Client.ContainerStatsOneShot(ctx, h.id)
	if err != nil {
		return runtime.Usage{}, h.r.engineErr("container stats", err)
	}
	defer rd.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(rd.Body, 1<<20)).Decode(&st); err != nil {
		return runtime.Usage{}, fmt.Errorf("container stats: %w", err)
	}
	return runtime.Usage{
		CPUSeconds:  float64(st.CPUStats.CPUUsage.TotalUsage) / 1e9,
		MemoryBytes: int64(st.MemoryStats.Usage),
		Pids:        int64(st.PidsStats.Current),
	}, nil
}

// BuildImage builds the image tag from a Dockerfile and the files beside
// it, through the engine (no registry: FROM scratch needs none). A rebuild
// under the same tag removes the image it replaces. Tests and the bench
// use it to make an image of the stub agent.
func BuildImage(ctx context.Context, c *client.Client, tag, dockerfile string, files map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files["Dockerfile"] = []byte(dockerfile)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	old, _ := c.ImageInspect(ctx, tag)
	res, err := c.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
	if now, err := c.ImageInspect(ctx, tag); err == nil && old.ID != "" && now.ID != old.ID {
		_, _ = c.ImageRemove(ctx, old.ID, image.RemoveOptions{})
	}
	return nil
}

// StubDockerfile runs the project's binary, built static, as the stub
// agent in an image FROM scratch.
const StubDockerfile = "FROM scratch\nCOPY agent-control-plane /agent-control-plane\nENTRYPOINT [\"/agent-control-plane\", \"stub-agent\"]\n"
