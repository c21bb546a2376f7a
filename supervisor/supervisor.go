package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Supervisor. Zero values take the defaults noted.
type Options struct {
	Root     string
	PortLo   int
	PortHi   int
	Runtimes map[string]Runtime // by name; "native" is the default runtime

	ReadyPath      string        // default /api/info
	StartupTimeout time.Duration // default 60s
	StopGrace      time.Duration // SIGTERM → SIGKILL; 0 kills at once
	ReapInterval   time.Duration // default 60s
	AutoStop       time.Duration // default for creates that do not say; 0 disables
	MaxLifetime    time.Duration // 0: no cap
	EventBuffer    int           // default 1024
	ReapOnExit     bool          // Close stops every live sandbox
	// LogMaxBytes caps each sandbox's stdout and stderr on disk (the live
	// file and one rotated file); default 10 MiB.
	LogMaxBytes int64

	// BaseEnv is given to every child before the request's envVars (PATH,
	// HOME and the like).
	BaseEnv map[string]string
	// ForwardEnv is merged into standalone sandboxes whose request lacks
	// the key (model-provider credentials).
	ForwardEnv map[string]string

	Logger *slog.Logger
	Now    func() time.Time // default time.Now; tests inject a fake clock
}

// DefaultLogMaxBytes is the default cap of each log stream on disk.
const DefaultLogMaxBytes = 10 << 20

// Harness markers: a request carrying one of these comes from a harness
// that provides its own credentials, so nothing is forwarded.
var harnessMarkers = []string{"GAMMA_AGENT_TOKEN", "HARNESS_SESSION_ID"}

// Supervisor owns the sandboxes of one root. Its methods are safe for
// concurrent use.
type Supervisor struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	fs     *rootFS
	lock   *rootLock
	logs   *logCap
	ports  *ports
	events *hub
	stats  *stats
	probe  *http.Client

	mu        sync.Mutex // guards sandboxes, each sandbox's info and handle, closed
	sandboxes map[string]*sandbox
	closed    bool

	// Defaults a reload may change (SetDefaults).
	autoStop, maxLifetime atomic.Int64

	bg sync.WaitGroup // readiness and exit watchers
	// lifetime is cancelled by Close; background work derives from it.
	lifetime context.Context
	cancel   context.CancelFunc
}

// sandbox is one registry entry.
type sandbox struct {
	// op serializes lifecycle operations (finish create, stop, delete,
	// exit handling, activity) on this sandbox. Lock order: op, then
	// Supervisor.mu.
	op sync.Mutex

	// Guarded by Supervisor.mu.
	info    Sandbox
	handle  Handle
	pending bool // create in progress: reserved, not visible
	// abandoned: an interrupted create found at start, reserved (and
	// pending) until its marker has been swept and its directory removed.
	abandoned bool
	stopping  bool // a stop is under way: an exit is expected, not a crash

	// Fixed at creation.
	id     string
	dir    string
	marker string
	grace  time.Duration
}

// New locks the root, rehydrates every sandbox recorded under it and
// returns the running supervisor. Call Run for periodic work and Close when
// done.
func New(ctx context.Context, opts Options) (*Supervisor, error) {
	if opts.ReadyPath == "" {
		opts.ReadyPath = "/api/info"
	}
	if opts.StartupTimeout <= 0 {
		opts.StartupTimeout = 60 * time.Second
	}
	if opts.StopGrace < 0 {
		opts.StopGrace = 0
	}
	if opts.ReapInterval <= 0 {
		opts.ReapInterval = time.Minute
	}
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = 1024
	}
	if opts.LogMaxBytes <= 0 {
		opts.LogMaxBytes = DefaultLogMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PortLo <= 0 || opts.PortHi < opts.PortLo || opts.PortHi > 65535 {
		return nil, fmt.Errorf("bad port range %d-%d", opts.PortLo, opts.PortHi)
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, err
	}
	opts.Root = root
	rfs, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	lock, err := lockRoot(rfs)
	if err != nil {
		rfs.close()
		return nil, err
	}
	logs, err := newLogCap(rfs, opts.LogMaxBytes, opts.Logger)
	if err != nil {
		lock.release()
		rfs.close()
		return nil, fmt.Errorf("log cap: %w", err)
	}
	lifetime, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Supervisor{
		opts:      opts,
		log:       opts.Logger,
		now:       opts.Now,
		fs:        rfs,
		lock:      lock,
		logs:      logs,
		ports:     newPorts(opts.PortLo, opts.PortHi),
		events:    newHub(opts.EventBuffer, 256, uint64(time.Now().UnixMicro())),
		stats:     newStats(),
		sandboxes: map[string]*sandbox{},
		lifetime:  lifetime,
		cancel:    cancel,
		probe: &http.Client{
			Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
			Timeout:   2 * time.Second,
		},
	}
	s.SetDefaults(opts.AutoStop, opts.MaxLifetime)
	s.events.onPub = s.stats.eventPublished
	s.rehydrate(ctx)
	return s, nil
}

// Root returns the absolute root directory.
func (s *Supervisor) Root() string { return s.opts.Root }

// PortRange returns the leased port range.
func (s *Supervisor) PortRange() (lo, hi int) { return s.opts.PortLo, s.opts.PortHi }

func (s *Supervisor) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

func newMarker(id string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return id + "." + hex.EncodeToString(b)
}

// Create validates req, leases a port, writes the sandbox directory and
// starts the workload. It returns the sandbox in state starting; readiness
// is probed in the background. On any error nothing is left behind: no
// process, no port lease, no directory.
func (s *Supervisor) Create(ctx context.Context, req CreateRequest) (sb Sandbox, err error) {
	defer func() { s.stats.created(err) }()
	if req.Runtime == "" {
		req.Runtime = "native"
	}
	if err := req.Validate(); err != nil {
		return Sandbox{}, err
	}
	rt, ok := s.opts.Runtimes[req.Runtime]
	if !ok {
		return Sandbox{}, fmt.Errorf("%w: %q", ErrUnsupportedRuntime, req.Runtime)
	}
	now := s.clock()
	autoStop := time.Duration(s.autoStop.Load())
	if req.AutoStopInterval != nil {
		autoStop = *req.AutoStopInterval
	}
	var autoDelete *time.Duration
	if req.AutoDeleteInterval != nil && *req.AutoDeleteInterval >= 0 {
		d := *req.AutoDeleteInterval
		autoDelete = &d
	}
	e := &sandbox{
		pending: true,
		id:      req.Name,
		dir:     filepath.Join(s.opts.Root, req.Name),
		marker:  newMarker(req.Name),
		grace:   s.opts.StopGrace,
		info: Sandbox{
			ID: req.Name, Runtime: req.Runtime, State: Starting, Labels: cloneMap(req.Labels),
			Snapshot: req.Snapshot, Public: req.Public, CreatedAt: now, UpdatedAt: now,
			LastActivityAt: now, AutoStopInterval: autoStop, AutoDeleteInterval: autoDelete,
		},
	}
	// Reserve the name.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Sandbox{}, ErrClosed
	}
	if _, taken := s.sandboxes[req.Name]; taken {
		s.mu.Unlock()
		return Sandbox{}, fmt.Errorf("%w: %s", ErrConflict, req.Name)
	}
	s.sandboxes[req.Name] = e
	s.mu.Unlock()
	e.op.Lock()
	defer e.op.Unlock()

	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			s.mu.Lock()
			delete(s.sandboxes, req.Name)
			s.mu.Unlock()
		}
	}()

	port, err := s.ports.lease(req.Name)
	if err != nil {
		return Sandbox{}, err
	}
	undo = append(undo, func() { s.ports.release(port, req.Name) })
	e.info.Port = port

	// The directory is built under a staging name that proves it is ours
	// (see rootFS.tempName) and appears under its own name, complete with
	// its intent record, in one rename that never replaces anything: a
	// daemon that dies on the way leaves either a staging directory it
	// can prove it made, or a sandbox directory with a record.
	made := s.fs.tempName(kindNew)
	if err := s.fs.mkdir(made); err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox directory: %w", err)
	}
	undo = append(undo, func() {
		if err := s.fs.removeAll(made); err != nil {
			s.log.Error("remove directory of a failed create", "sandbox", req.Name, "err", err)
		}
	})
	workspace := filepath.Join(e.dir, WorkspaceDir)
	if err := s.fs.mkdir(made + "/" + WorkspaceDir); err != nil {
		return Sandbox{}, fmt.Errorf("create workspace: %w", err)
	}
	env := s.childEnv(req, port, workspace)
	envJSON, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return Sandbox{}, err
	}
	// The env file and the intent record are not fsynced: they must exist
	// before the workload does, so that a daemon that dies mid-create
	// leaves a record whose marker finds the child. Durability against
	// power loss comes with the committed record below, whose directory
	// fsync covers them too; a power loss kills the child anyway.
	if err := s.fs.createFile(made+"/"+EnvFile, envJSON); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", EnvFile, err)
	}
	intent, err := json.MarshalIndent(s.toRecord(e.info, e.marker, e.grace, nil), "", "  ")
	if err != nil {
		return Sandbox{}, err
	}
	if err := s.fs.createFile(made+"/"+RecordFile, append(intent, '\n')); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}
	if err := s.fs.renameNoReplace(made, req.Name); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Sandbox{}, fmt.Errorf("%w: %s: the root holds an entry of that name that is not a sandbox; it is left alone", ErrConflict, req.Name)
		}
		return Sandbox{}, fmt.Errorf("create sandbox directory: %w", err)
	}
	made = req.Name
	h, err := rt.Start(context.WithoutCancel(ctx), Spec{
		ID: req.Name, Env: envList(env), Dir: e.dir, Workspace: workspace,
		Stdout: filepath.Join(e.dir, StdoutFile), Stderr: filepath.Join(e.dir, StderrFile),
		Port: port, Marker: e.marker, Snapshot: req.Snapshot,
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("start workload: %w", err)
	}
	undo = append(undo, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = h.Stop(stopCtx, 0)
	})
	if err := s.writeRecord(e.id, s.toRecord(e.info, e.marker, e.grace, h.State()), true); err != nil {
		return Sandbox{}, fmt.Errorf("write %s: %w", RecordFile, err)
	}

	s.mu.Lock()
	e.handle = h
	e.pending = false
	info := e.info
	s.events.publish(Event{Type: EventCreated, Time: now, Sandbox: info})
	s.mu.Unlock()
	s.log.Info("sandbox created", "sandbox", req.Name, "runtime", req.Runtime, "port", port, "labels", req.Labels)
	s.logs.watch(e.id)
	s.watch(e, h, s.opts.StartupTimeout)
	return info, nil
}

// childEnv builds the child's whole environment: base, forwarded
// credentials for standalone sandboxes, the request, then the variables the
// daemon owns.
func (s *Supervisor) childEnv(req CreateRequest, port int, workspace string) map[string]string {
	env := cloneMap(s.opts.BaseEnv)
	standalone := true
	for _, k := range harnessMarkers {
		if _, ok := req.Env[k]; ok {
			standalone = false
		}
	}
	if standalone {
		for k, v := range s.opts.ForwardEnv {
			env[k] = v
		}
	}
	for k, v := range req.Env {
		env[k] = v
	}
	env["PORT"] = strconv.Itoa(port)
	env["AGENT_SANDBOX_ID"] = req.Name
	env["AGENT_WORKSPACE_DIR"] = workspace
	return env
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// cloneMap copies m; nil becomes an empty map.
func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// watch starts the goroutine that follows a live workload: readiness for up
// to timeout (measured on the real clock), then exit.
func (s *Supervisor) watch(e *sandbox, h Handle, timeout time.Duration) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.awaitReady(e, h, timeout)
		select {
		case <-h.Done():
			s.exited(e, h)
		case <-s.lifetime.Done():
		}
	}()
}

// awaitReady polls the readiness path until it answers 2xx, the workload
// exits, the deadline passes or the supervisor closes. There is no kernel
// event for "serving HTTP", so it polls, starting fast and backing off.
func (s *Supervisor) awaitReady(e *sandbox, h Handle, timeout time.Duration) {
	s.mu.Lock()
	state, port := e.info.State, e.info.Port
	s.mu.Unlock()
	if state != Starting {
		return
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + s.opts.ReadyPath
	timer := time.NewTimer(max(timeout, 0))
	defer timer.Stop()
	// Every millisecond at first, when a healthy agent-server comes up,
	// then backing off so that a slow one costs little.
	wait, attempts := time.Millisecond, 0
	for {
		if s.ready(url) {
			s.transition(e, h, func(sb *Sandbox) (string, bool) {
				if sb.State != Starting {
					return "", false
				}
				sb.State = Started
				sb.StartedAt = s.clock()
				return EventStarted, true
			})
			return
		}
		select {
		case <-h.Done():
			return
		case <-s.lifetime.Done():
			return
		case <-timer.C:
			s.log.Warn("sandbox not ready before the startup deadline", "sandbox", e.id)
			s.stop(e, StopStartupFailed, ReasonStartupTimeout, 0)
			return
		case <-time.After(wait):
		}
		if attempts++; attempts > 25 {
			wait = min(wait*3/2, 100*time.Millisecond)
		}
	}
}

func (s *Supervisor) ready(url string) bool {
	ctx, cancel := context.WithTimeout(s.lifetime, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := s.probe.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// transition applies change to e under its op lock if the handle is still
// e's, persists the record and publishes the named event.
func (s *Supervisor) transition(e *sandbox, h Handle, change func(*Sandbox) (event string, ok bool)) {
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	if e.handle != h {
		s.mu.Unlock()
		return
	}
	next := e.info
	ev, ok := change(&next)
	if !ok {
		s.mu.Unlock()
		return
	}
	next.UpdatedAt = s.clock()
	s.mu.Unlock()
	s.commit(e, next, ev)
}

// commit persists next as e's state and then makes it visible with event ev
// (if not empty). Callers hold e.op. A record that cannot be written is
// logged: the in-memory state still reflects the truth about the process.
func (s *Supervisor) commit(e *sandbox, next Sandbox, ev string) {
	if err := s.writeRecord(e.id, s.toRecord(next, e.marker, e.grace, s.handleState(e)), true); err != nil {
		s.log.Error("persist sandbox record", "sandbox", next.ID, "err", err)
	}
	s.mu.Lock()
	e.info = next
	if ev != "" {
		s.events.publish(Event{Type: ev, Time: next.UpdatedAt, Sandbox: next})
	}
	s.mu.Unlock()
	if ev != "" {
		s.log.Info("sandbox "+strings.TrimPrefix(ev, "sandbox."), "sandbox", next.ID, "errorReason", next.ErrorReason)
	}
}

func (s *Supervisor) handleState(e *sandbox) json.RawMessage {
	s.mu.Lock()
	h := e.handle
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	return h.State()
}

// exited handles a workload that ended by itself.
func (s *Supervisor) exited(e *sandbox, h Handle) {
	how := h.ExitReason()
	var port int
	stopped := false
	s.transition(e, h, func(sb *Sandbox) (string, bool) {
		if !sb.State.Live() {
			return "", false
		}
		markExited(sb, how, s.clock())
		port, stopped = sb.Port, true
		s.stats.stopped(sb.StopReason)
		return EventStopped, true
	})
	if stopped {
		s.gone(e, port)
		s.afterStop(e)
	}
}

// markExited records in sb that its workload ended by itself, how, at now.
func markExited(sb *Sandbox, how string, now time.Time) {
	if sb.State == Starting {
		sb.ErrorReason = ReasonExitedStartup + ": " + how
		sb.StopReason = StopStartupFailed
	} else {
		sb.ErrorReason = how
		sb.StopReason = StopCrashed
	}
	sb.State = Stopped
	sb.StoppedAt = now
	sb.UpdatedAt = now
}

// Get returns one sandbox by id or name.
func (s *Supervisor) Get(id string) (Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sandboxes[id]
	if !ok || e.pending {
		return Sandbox{}, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	}
	return s.view(e), nil
}

// view returns e's info as the runtime has it now: a workload that has
// exited shows as stopped even before its exit has been handled.
// Callers hold s.mu.
func (s *Supervisor) view(e *sandbox) Sandbox {
	sb := e.info
	// During a stop the exit is expected: the stop's outcome, not a crash,
	// is what readers see once it commits.
	if sb.State.Live() && e.handle != nil && !e.stopping {
		select {
		case <-e.handle.Done():
			markExited(&sb, e.handle.ExitReason(), s.clock())
		default:
		}
	}
	return sb
}

// List returns the sandboxes whose labels match f, oldest first.
func (s *Supervisor) List(f Filter) []Sandbox {
	page, _ := s.ListPage(ListOptions{Labels: f})
	return page
}

func (s *Supervisor) listLocked(f Filter) []Sandbox {
	page, _ := s.listPageLocked(ListOptions{Labels: f})
	return page
}

// Cursor is a position in the list order (creation time, then id).
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

func (c Cursor) before(k listKey) bool { return listKey{at: c.CreatedAt, id: c.ID}.less(k) }

// ListOptions choose a page of the list.
type ListOptions struct {
	Labels Filter
	States []State // any of these; empty: every state
	After  *Cursor // only sandboxes after this position; nil: from the start
	Limit  int     // at most this many; 0 or less: all
}

// ListPage returns the sandboxes that match o in list order (oldest first,
// then by id), at most o.Limit of them, and whether more follow. Walking
// pages with After set to the last one returned sees every sandbox that
// exists throughout the walk exactly once, whatever is created or deleted
// meanwhile. It holds at most Limit sandboxes, whatever the registry's
// size.
func (s *Supervisor) ListPage(o ListOptions) (page []Sandbox, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listPageLocked(o)
}

func (s *Supervisor) listPageLocked(o ListOptions) (page []Sandbox, more bool) {
	limit := o.Limit
	if limit <= 0 {
		limit = math.MaxInt
	}
	// Candidates are small (position and entry); the limit+1 first are
	// kept in a max-heap by position, and only the page's are copied out.
	h := &pageHeap{}
	for _, e := range s.sandboxes {
		if e.pending || !o.Labels.Match(e.info.Labels) {
			continue
		}
		if len(o.States) > 0 && !slices.Contains(o.States, s.view(e).State) {
			continue
		}
		c := listKey{e.info.CreatedAt, e.id, e}
		if o.After != nil && !o.After.before(c) {
			continue
		}
		switch {
		case limit == math.MaxInt:
			*h = append(*h, c) // all of them: sorted once below
		case len(*h) <= limit:
			h.push(c)
		case c.less((*h)[0]):
			h.replaceTop(c)
		}
	}
	keys := []listKey(*h)
	slices.SortFunc(keys, func(a, b listKey) int { return a.compare(b) })
	if more = len(keys) > limit; more {
		keys = keys[:limit]
	}
	page = make([]Sandbox, len(keys))
	for i, k := range keys {
		page[i] = s.view(k.e)
	}
	return page, more
}

// listKey is a sandbox's position in the list order.
type listKey struct {
	at time.Time
	id string
	e  *sandbox
}

func (a listKey) compare(b listKey) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func (a listKey) less(b listKey) bool { return a.compare(b) < 0 }

// pageHeap is a max-heap of list positions (typed, so that no key is
// boxed into an interface on its way in).
type pageHeap []listKey

func (h *pageHeap) push(k listKey) {
	*h = append(*h, k)
	for i := len(*h) - 1; i > 0; {
		p := (i - 1) / 2
		if !(*h)[p].less((*h)[i]) {
			break
		}
		(*h)[p], (*h)[i] = (*h)[i], (*h)[p]
		i = p
	}
}

// replaceTop puts k in place of the largest key and restores the order.
func (h pageHeap) replaceTop(k listKey) {
	h[0] = k
	for i := 0; ; {
		l, r, big := 2*i+1, 2*i+2, i
		if l < len(h) && h[big].less(h[l]) {
			big = l
		}
		if r < len(h) && h[big].less(h[r]) {
			big = r
		}
		if big == i {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}

func (s *Supervisor) lookup(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sandboxes[id]
	if !ok || e.pending {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, Clip(id, MaxQuoted))
	}
	return e, nil
}

// Stop stops a sandbox: SIGTERM, the grace period, SIGKILL (force skips
// the grace). It is terminal and idempotent: stopping a stopped sandbox
// returns it unchanged.
func (s *Supervisor) Stop(ctx context.Context, id string, force bool) (Sandbox, error) {
	e, err := s.lookup(id)
	if err != nil {
		return Sandbox{}, err
	}
	grace := e.grace
	if force {
		grace = 0
	}
	if err := s.stop(e, StopExplicit, "", grace); err != nil {
		return Sandbox{}, err
	}
	// Not Get: a sandbox with auto-delete 0 is already gone (destroyed).
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view(e), nil
}

// stop ends e's workload and marks it stopped; see stopLocked.
func (s *Supervisor) stop(e *sandbox, why StopReason, errorReason string, grace time.Duration) error {
	e.op.Lock()
	stopped, err := s.stopLocked(e, why, errorReason, grace)
	e.op.Unlock()
	if stopped && why != StopDeleted {
		s.afterStop(e)
	}
	return err
}

// stopLocked ends e's workload and marks it stopped with the reasons. The
// caller holds e.op for the whole stop, so operations on e wait for it;
// other sandboxes do not. The port is released only after the workload is
// gone. It reports whether it stopped anything.
func (s *Supervisor) stopLocked(e *sandbox, why StopReason, errorReason string, grace time.Duration) (bool, error) {
	s.mu.Lock()
	live, h, port := e.info.State.Live(), e.handle, e.info.Port
	e.stopping = live
	s.mu.Unlock()
	if !live {
		return false, nil
	}
	defer func() {
		s.mu.Lock()
		e.stopping = false
		s.mu.Unlock()
	}()
	if h != nil {
		// The stop must finish even if the caller goes away.
		ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
		err := h.Stop(ctx, grace)
		cancel()
		if err != nil {
			s.log.Error("stop sandbox", "sandbox", e.id, "err", err)
			return false, fmt.Errorf("stop %s: %w", e.id, err)
		}
	}
	s.mu.Lock()
	next := e.info
	s.mu.Unlock()
	next.State = Stopped
	next.ErrorReason = errorReason
	next.StopReason = why
	next.StoppedAt = s.clock()
	next.UpdatedAt = next.StoppedAt
	s.stats.stopped(why)
	s.commit(e, next, EventStopped)
	s.gone(e, port)
	return true, nil
}

// gone releases what a sandbox's workload held, once it is gone: its port
// and its logs' cap.
func (s *Supervisor) gone(e *sandbox, port int) {
	s.ports.release(port, e.id)
	s.logs.release(e.id)
}

// afterStop deletes a sandbox whose auto-delete interval is zero.
func (s *Supervisor) afterStop(e *sandbox) {
	s.mu.Lock()
	ad := e.info.AutoDeleteInterval
	s.mu.Unlock()
	if ad != nil && *ad == 0 {
		if err := s.delete(e); err != nil {
			s.log.Error("auto-delete", "sandbox", e.id, "err", err)
		}
	}
}

// Delete stops a sandbox if needed and removes its directory and record.
// Deleting a sandbox that does not exist succeeds and touches nothing on
// disk, whatever the root holds under that name.
func (s *Supervisor) Delete(ctx context.Context, id string) error {
	e, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.delete(e)
}

func (s *Supervisor) delete(e *sandbox) error {
	if err := s.stop(e, StopDeleted, "", e.grace); err != nil {
		return err
	}
	e.op.Lock()
	defer e.op.Unlock()
	s.mu.Lock()
	if cur, ok := s.sandboxes[e.id]; !ok || cur != e {
		s.mu.Unlock()
		return nil // deleted meanwhile
	}
	s.mu.Unlock()
	if err := s.fs.removeAll(e.id); err != nil {
		return fmt.Errorf("remove sandbox directory: %w", err)
	}
	s.mu.Lock()
	delete(s.sandboxes, e.id)
	gone := e.info
	gone.State = Destroyed
	gone.UpdatedAt = s.clock()
	e.info = gone
	s.events.publish(Event{Type: EventDeleted, Time: gone.UpdatedAt, Sandbox: gone})
	s.mu.Unlock()
	s.log.Info("sandbox deleted", "sandbox", gone.ID)
	return nil
}

// Subscribe opens a watch on the event feed for sandboxes matching f. If
// after is given and every later event is still buffered, those events are
// returned for replay; otherwise the first event is a sandboxes_replaced
// snapshot. Either way no event is missed or repeated between the two.
func (s *Supervisor) Subscribe(f Filter, after *uint64) (*Subscription, []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, replay, ok, seq := s.events.subscribe(f, after)
	if ok {
		return sub, replay
	}
	return sub, []Event{{Seq: seq, Type: EventSnapshot, Time: s.clock(), All: s.listLocked(f)}}
}

// Run does the periodic work (auto-stop, max lifetime, auto-delete) every
// reap interval until ctx ends.
func (s *Supervisor) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lifetime.Done():
			return
		case <-t.C:
			s.Reap()
		}
	}
}

// Close stops background work and releases the root. Children keep running
// unless Options.ReapOnExit is set, in which case every live sandbox is
// stopped first, all at once; if ctx ends before they are, Close goes on
// and returns ctx's error, and the children not yet stopped keep running.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var live []*sandbox
	for _, e := range s.sandboxes {
		if e.info.State.Live() && !e.pending {
			live = append(live, e)
		}
	}
	s.mu.Unlock()
	var err error
	if s.opts.ReapOnExit {
		var wg sync.WaitGroup
		for _, e := range live {
			wg.Go(func() { s.stop(e, StopOther, "daemon_shutdown", e.grace) })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = ctx.Err()
			s.log.Warn("shutdown deadline passed before every sandbox stopped")
		}
	}
	s.cancel()
	s.bg.Wait()
	s.events.closeAll()
	s.logs.close()
	s.lock.release()
	s.fs.close()
	return err
}
