package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor/childenv"
	"github.com/agent-control-plane/agent-control-plane/supervisor/interp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/lsp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/shell"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// Options configure a Supervisor. Zero values take the defaults noted.
type Options struct {
	Root   string
	PortLo int
	PortHi int
	// Runtimes are the runtimes creates may name; the registry's default
	// serves creates that name none.
	Runtimes *runtime.Registry

	// Snapshots are the named profiles creates may pick (see snapshot.Snapshot);
	// the one named "default" runs when a create names none.
	Snapshots []snapshot.Snapshot

	ReadyPath      string        // default /api/info
	StartupTimeout time.Duration // default 60s
	StopGrace      time.Duration // SIGTERM → SIGKILL; 0 kills at once
	// CheckInterval is how often the periodic check (auto-stop, max
	// lifetime, auto-delete) runs; default 60s.
	CheckInterval time.Duration
	AutoStop      time.Duration // default for creates that do not say; 0 disables
	MaxLifetime   time.Duration // 0: no cap
	EventBuffer   int           // default 1024
	StopOnClose   bool          // Close stops every live sandbox
	// LogMaxBytes caps each sandbox's stdout and stderr on disk (the live
	// file and one rotated file); default 10 MiB.
	LogMaxBytes int64

	// Limits are the resource limits of creates that do not give their
	// own; zero fields: none.
	Limits runtime.Resources
	// IgnoreUnsupportedLimits starts a sandbox without the limits its
	// runtime cannot enforce here, instead of refusing the create or
	// resize with ErrLimitsUnsupported.
	IgnoreUnsupportedLimits bool

	// Env builds each child's environment (base, forwarded credentials,
	// request); the daemon's own variables are added last.
	Env childenv.Policy

	// OnQuiet runs once the feed has been silent for QuietAfter after an
	// event: a burst of creates, stops or deletes is over. No timer runs
	// while nothing happens. The daemon returns the burst's memory to
	// the OS there.
	OnQuiet func()

	Logger *slog.Logger
	Now    func() time.Time // default time.Now; tests inject a fake clock
}

// QuietAfter is how long the feed must be silent before OnQuiet runs.
const QuietAfter = time.Second

// DefaultLogMaxBytes is the default cap of each log stream on disk.
const DefaultLogMaxBytes = 10 << 20

// Supervisor owns the sandboxes of one root. Its methods are safe for
// concurrent use.
type Supervisor struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	fs     *rootFS
	lock   *rootLock
	logs   *logcap.Cap
	ports  *ports
	events *hub
	tools  toolbox // commands running, shell sessions
	terms  perWorkload[*terminal.Terminal]
	ctxs   perWorkload[*interp.Context]
	lsps   perWorkload[*lsp.Server]
	volMu  sync.Mutex // volumes made and deleted one at a time
	// unavail is Unavailable's last answer, until when it holds.
	unavail struct {
		mu    sync.Mutex
		last  map[string]string
		until time.Time
	}
	// credentials are the daemon's own secrets, redacted everywhere.
	credentials atomic.Pointer[[]string]
	stats       *stats
	probe       *probe.HTTP
	quiet       *time.Timer // runs opts.OnQuiet; nil without one
	spares      spares      // staging directories made ahead

	snapshots atomic.Pointer[map[string]snapshot.Snapshot] // by name; SetSnapshots replaces them

	// Naming: a function whose name ends in "Locked" is called with mu
	// held; one that runs under a sandbox's op lock says so in its doc.
	mu        sync.Mutex // guards sandboxes, each sandbox's info and handle, closed
	sandboxes map[string]*sandbox
	closed    bool

	// Defaults a reload may change (SetDefaults).
	autoStop, maxLifetime atomic.Int64

	// bg counts every goroutine that may touch a sandbox or the root:
	// watchers, stops and deletes (which finish even when their caller
	// leaves) and Run. Close waits for it before it releases the root.
	// Add is called only under mu with closed false.
	bg sync.WaitGroup
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
	handle  runtime.Handle
	pending bool // create in progress: reserved, not visible
	// abandoned: an interrupted create found at start, reserved (and
	// pending) until its marker has been swept and its directory removed.
	abandoned bool
	// startIntent: its record names the marker of an interrupted start,
	// to be cleared once that marker has been swept. Set before the
	// sandbox is registered; cleared by clearStartIntents alone.
	startIntent bool
	// changed is closed when info changes (log followers wait on it);
	// nil until one asks.
	changed chan struct{}
	// teardown is a stop or a delete under way (Sandbox.Teardown),
	// changed only by setTeardown.
	teardown Teardown

	// Fixed at creation.
	id     string
	dir    string
	marker string
	grace  time.Duration
	// readyPath and startup are how readiness is probed (from the
	// snapshot the sandbox was created from).
	readyPath string
	startup   time.Duration
	// launched is when the current workload was started by this daemon
	// (zero for one adopted), for the time-to-ready histogram. Guarded
	// by Supervisor.mu.
	launched time.Time
}

// changesLocked returns a channel closed at e's next change of info.
func (e *sandbox) changesLocked() <-chan struct{} {
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	return e.changed
}

// setInfoLocked makes next e's state and tells whoever waits for a
// change.
// viewLocked is the sandbox as readers see it.
func (e *sandbox) viewLocked() Sandbox {
	sb := e.info
	sb.Teardown = e.teardown
	sb.Workspace = filepath.Join(e.dir, WorkspaceDir)
	return sb
}

func (e *sandbox) setInfoLocked(next Sandbox) {
	e.info = next
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// New locks the root, rehydrates every sandbox recorded under it and
// returns the running supervisor. Call RunChecks for periodic work and
// Close when done.
//
// It is long because start-up is one ordered sequence: lock the root,
// sweep, rehydrate, clear interrupted starts, then serve.
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
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = time.Minute
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
	if opts.Runtimes == nil || opts.Runtimes.Default() == "" {
		return nil, errors.New("no runtime registered")
	}
	if opts.PortLo <= 0 || opts.PortHi < opts.PortLo || opts.PortHi > 65535 {
		return nil, fmt.Errorf("bad port range %d-%d", opts.PortLo, opts.PortHi)
	}
	snapshots, err := checkSnapshots(&opts)
	if err != nil {
		return nil, err
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
		rfs.Close()
		return nil, err
	}
	logs, err := logcap.New(rfs.Dir, rfs.tempFileName, opts.LogMaxBytes, opts.Logger)
	if err != nil {
		lock.release()
		rfs.Close()
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
		probe:     probe.NewHTTP(time.Second), // per attempt
		tools:     toolbox{budget: shell.NewBudget(MaxSessionOutput)},
		terms:     perWorkload[*terminal.Terminal]{end: (*terminal.Terminal).Close},
		ctxs:      perWorkload[*interp.Context]{end: (*interp.Context).Close},
		lsps:      perWorkload[*lsp.Server]{end: (*lsp.Server).Stop, ended: ended},
	}
	s.snapshots.Store(&snapshots)
	s.SetDefaults(opts.AutoStop, opts.MaxLifetime)
	s.events.onPub = s.stats.eventPublished
	if opts.OnQuiet != nil {
		s.quiet = time.AfterFunc(QuietAfter, opts.OnQuiet)
		s.quiet.Stop()
		s.events.onPub = func(typ string) {
			s.stats.eventPublished(typ)
			s.quiet.Reset(QuietAfter)
		}
	}
	if n, eph, err := ephemeralOverlap(opts.PortLo, opts.PortHi, ephemeralRangeFile, ephemeralReservedFile); err == nil && n > 0 {
		s.log.Warn("the sandbox port range overlaps the ports the kernel gives outgoing connections: one can take a leased port before its workload binds it, and the workload fails (address already in use); choose a range outside it, or reserve the overlap (sysctl net.ipv4.ip_local_reserved_ports)",
			"ports", fmt.Sprintf("%d-%d", opts.PortLo, opts.PortHi), "ephemeral", eph, "overlap", n)
	}
	s.rehydrate(ctx)
	s.fillSpares()
	return s, nil
}

// Root returns the absolute root directory.
func (s *Supervisor) Root() string { return s.opts.Root }

// PortRange returns the leased port range.
func (s *Supervisor) PortRange() (lo, hi int) { return s.opts.PortLo, s.opts.PortHi }

// Runtimes lists the names of the runtimes creates may ask for, the
// default first.
func (s *Supervisor) Runtimes() []string { return s.opts.Runtimes.Names() }

// Unavailable names the registered runtimes that cannot start workloads
// now, and why (a container engine that is down). It asks each runtime
// that can tell, within ctx.
//
// An answer is kept for UnavailableTTL and shared by the callers that ask
// meanwhile: a caller asking at every request (an unauthenticated one,
// say) cannot make the daemon ask a container engine as often.
func (s *Supervisor) Unavailable(ctx context.Context) map[string]string {
	s.unavail.mu.Lock()
	defer s.unavail.mu.Unlock()
	if now := time.Now(); now.Before(s.unavail.until) {
		return maps.Clone(s.unavail.last)
	}
	out := s.unavailable(ctx)
	if ctx.Err() == nil { // a cancelled caller's answer is not kept
		s.unavail.last, s.unavail.until = out, time.Now().Add(UnavailableTTL)
	}
	return maps.Clone(out)
}

// UnavailableTTL is how long Unavailable's answer is kept.
const UnavailableTTL = 2 * time.Second

func (s *Supervisor) unavailable(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, name := range s.opts.Runtimes.Names() {
		rt, _ := s.opts.Runtimes.Get(name)
		if c, ok := rt.(runtime.Checker); ok {
			if err := c.Check(ctx); err != nil {
				out[name] = err.Error()
			}
		}
	}
	return out
}

func (s *Supervisor) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// RunChecks does the periodic check (auto-stop, max lifetime, auto-delete)
// every check interval until ctx ends or the supervisor closes. Close
// waits for it.
func (s *Supervisor) RunChecks(ctx context.Context) {
	if !s.track() {
		return
	}
	defer s.bg.Done()
	t := time.NewTicker(s.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lifetime.Done():
			return
		case <-t.C:
			s.Check()
		}
	}
}

// track counts one more goroutine in s.bg, unless the supervisor is
// closed.
func (s *Supervisor) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.bg.Add(1)
	return true
}

// detach runs f to its end even when ctx ends first: a stop or delete cut
// halfway would leave the record, the port and the process disagreeing.
// The caller waits for f only while ctx lasts; Close waits for it always.
func (s *Supervisor) detach(ctx context.Context, f func() error) error {
	if !s.track() {
		return ErrClosed
	}
	done := make(chan error, 1)
	go func() {
		defer s.bg.Done()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops background work and releases the root. Children keep running
// unless Options.StopOnClose is set, in which case every live sandbox is
// stopped first, all at once, each with its grace; if ctx ends before
// they are, the rest are killed at once and Close returns ctx's error.
// Either way Close returns only once nothing it started still runs: Run,
// watchers, stops and deletes. Only then is the root lock released.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	var live []*sandbox
	for _, e := range s.sandboxes {
		if e.info.State.Live() && !e.pending {
			live = append(live, e)
		}
	}
	s.closed = true
	s.mu.Unlock()
	defer func() {
		if s.quiet != nil {
			s.quiet.Stop()
		}
	}()
	var err error
	if s.opts.StopOnClose {
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
			s.log.Warn("shutdown deadline passed before every sandbox stopped: killing the rest")
			s.killLive(live)
			<-done
		}
	}
	// Terminals, interpreters and language servers are reached through
	// this daemon alone (a next one cannot attach to them): they end
	// with it, not with their sandboxes.
	s.terms.closeAll()
	s.ctxs.closeAll()
	s.lsps.closeAll()
	s.cancel()
	s.bg.Wait()
	s.removeSpares()
	s.events.closeAll()
	s.logs.Close()
	s.lock.release()
	s.fs.Close()
	return err
}

// killLive kills the workloads of those sandboxes still live, without
// grace, beside the stops under way (which then see them gone).
func (s *Supervisor) killLive(live []*sandbox) {
	var wg sync.WaitGroup
	for _, e := range live {
		s.mu.Lock()
		h := e.handle
		s.mu.Unlock()
		if h == nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.Stop(ctx, 0); err != nil {
				s.log.Error("kill sandbox at shutdown", "sandbox", e.id, "err", err)
			}
		})
	}
	wg.Wait()
}
