// Command acp-bench measures agent-control-plane on this machine: how fast
// a sandbox is ready compared with the same stub started directly, how
// fast a crash is seen, how the daemon behaves with hundreds of children,
// how fast it re-adopts them after a SIGKILL, and how fast events reach
// many subscribers. It starts its own daemon on ephemeral ports and prints
// a Markdown table (or JSON with --json).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/auth"
	"github.com/agent-control-plane/agent-control-plane/api/client"
)

type config struct {
	bin         string
	runs        int
	scale       int
	rehydrate   int
	subscribers int
	portLo      int
	json        bool
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/agent-control-plane", "agent-control-plane binary")
	flag.IntVar(&c.runs, "runs", 40, "runs per latency measurement")
	flag.IntVar(&c.scale, "scale", 800, "sandboxes started concurrently in the scale test")
	flag.IntVar(&c.rehydrate, "rehydrate", 500, "live children when the daemon is killed and restarted")
	flag.IntVar(&c.subscribers, "subscribers", 100, "SSE subscribers in the event test")
	flag.IntVar(&c.portLo, "port-lo", 10100, "first sandbox port (the range is scale+100 ports, kept below the ephemeral range)")
	flag.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	flag.Parse()
	if c.rehydrate > c.scale {
		c.rehydrate = c.scale
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		fatal(err)
	}
	c.bin = bin
	r, err := run(c)
	if err != nil {
		fatal(err)
	}
	if c.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	r.markdown(os.Stdout)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "acp-bench:", err)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "acp-bench: "+format+"\n", args...)
}

// stat is a latency distribution in milliseconds.
type stat struct {
	N      int     `json:"n"`
	Median float64 `json:"medianMs"`
	P99    float64 `json:"p99Ms"`
	Max    float64 `json:"maxMs"`
}

func summarize(ds []time.Duration) stat {
	if len(ds) == 0 {
		return stat{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return stat{N: len(s), Median: ms(q(0.5)), P99: ms(q(0.99)), Max: ms(s[len(s)-1])}
}

type results struct {
	Machine struct {
		CPUs   int    `json:"cpus"`
		Kernel string `json:"kernel"`
		Go     string `json:"go"`
		Model  string `json:"cpuModel"`
	} `json:"machine"`
	Ready struct {
		Floor        stat `json:"floorDirectSpawn"`
		Answered     stat `json:"createAnswered"`
		ChildAnswers stat `json:"createToChildAnswers"`
		Started      stat `json:"createToStartedEvent"`
	} `json:"ready"`
	Crash struct {
		Plain      stat `json:"plain"`
		Grandchild stat `json:"grandchildHoldsStdout"`
		Readopted  stat `json:"readoptedAfterRestart"`
	} `json:"crash"`
	Scale struct {
		N               int     `json:"n"`
		AllStartedMs    float64 `json:"allStartedMs"`
		PortCollisions  int     `json:"portCollisions"`
		RSSIdleMiB      float64 `json:"rssIdleMiB"`
		RSSAtNMiB       float64 `json:"rssAtNMiB"`
		PerSandboxKiB   float64 `json:"perSandboxKiB"`
		List            stat    `json:"listLatency"`
		Goroutines      int     `json:"goroutinesAtN"`
		DaemonThreadsAt int     `json:"daemonThreadsAtN"`
	} `json:"scale"`
	Rehydrate struct {
		N             int     `json:"n"`
		InfoMs        float64 `json:"untilInfoMs"`
		AllAdoptedMs  float64 `json:"untilAllAdoptedMs"`
		AdoptedMetric int     `json:"adoptedPerMetrics"`
	} `json:"rehydrate"`
	Events struct {
		Subscribers int  `json:"subscribers"`
		Delivery    stat `json:"killToEventAtEverySubscriber"`
		Quiet       stat `json:"killToEventAtEverySubscriberNoLoad"`
		Missed      int  `json:"missed"`
	} `json:"events"`
}

func run(c config) (*results, error) {
	r := &results{}
	r.Machine.CPUs = runtime.NumCPU()
	r.Machine.Go = runtime.Version()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		r.Machine.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				r.Machine.Model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	root, err := os.MkdirTemp("", "acp-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	// The API listens just below the sandbox range, outside the ephemeral
	// range: polling a dead ephemeral port can self-connect and take it.
	d := &daemon{bin: c.bin, root: root, addr: "127.0.0.1:" + strconv.Itoa(c.portLo-1),
		portLo: c.portLo, portHi: c.portLo + c.scale + 99}
	if err := d.start(); err != nil {
		return nil, err
	}
	defer d.cleanup()

	steps := []struct {
		name string
		run  func(config, *daemon, *results) error
	}{
		{fmt.Sprintf("readiness: %d runs", c.runs), benchReady},
		{fmt.Sprintf("crash detection: 3 × %d runs", c.runs), benchCrash},
		{fmt.Sprintf("scale: %d sandboxes", c.scale), benchScale},
		{fmt.Sprintf("rehydration: %d live children", c.rehydrate), benchRehydrate},
		{fmt.Sprintf("events: %d subscribers", c.subscribers), benchEvents},
	}
	for _, step := range steps {
		progress("%s", step.name)
		if err := step.run(c, d, r); err != nil {
			return nil, fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return r, nil
}

// daemon is the agent-control-plane under test.
type daemon struct {
	bin, root, addr string
	portLo, portHi  int
	cmd             *exec.Cmd
	events          *feed
}

// benchToken is the bench daemon's bearer token; every request to the
// daemon carries it.
var benchToken = auth.New()

type bearer struct{ base http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+benchToken)
	return b.base.RoundTrip(r)
}

var httpc = &http.Client{Timeout: 60 * time.Second, Transport: bearer{&http.Transport{MaxIdleConnsPerHost: 256}}}

// daemonEnv is the bench daemon's environment.
func daemonEnv(extra ...string) []string {
	return append(append(os.Environ(), "AGENT_CONTROL_PLANE_TOKEN="+benchToken, "AGENT_CONTROL_PLANE_AUTOSTOP_MINUTES=0"), extra...)
}

func (d *daemon) url(path string) string { return "http://" + d.addr + path }

func (d *daemon) start() error {
	cmd := exec.Command(d.bin, "serve", "--root", d.root, "--listen", d.addr,
		"--port-range", fmt.Sprintf("%d-%d", d.portLo, d.portHi))
	cmd.Env = daemonEnv("AGENT_CONTROL_PLANE_STOP_GRACE_MS=2000", "AGENT_CONTROL_PLANE_LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd = cmd
	if err := waitFor(30*time.Second, func() bool { return d.info() == nil }); err != nil {
		return errors.New("daemon did not answer /v1/info")
	}
	f, err := subscribe(d.url("/v1/events"))
	if err != nil {
		return err
	}
	d.events = f
	return nil
}

func (d *daemon) info() error {
	resp, err := httpc.Get(d.url("/v1/info"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("info: %d", resp.StatusCode)
	}
	return nil
}

// kill SIGKILLs the daemon; its children live on.
func (d *daemon) kill() {
	d.events.close()
	d.cmd.Process.Kill()
	d.cmd.Wait()
}

func (d *daemon) cleanup() {
	if d.cmd != nil && d.cmd.ProcessState == nil {
		d.kill()
	}
	// Kill every child by its marker, as a user's cleanup would.
	recs, _ := filepath.Glob(filepath.Join(d.root, "*", "sandbox.json"))
	for _, p := range recs {
		if pid := recordPID(p); pid > 0 {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func recordPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var rec struct {
		Handle struct{ PID int } `json:"handle"`
	}
	json.Unmarshal(b, &rec)
	return rec.Handle.PID
}

func (d *daemon) pid(id string) int { return recordPID(filepath.Join(d.root, id, "sandbox.json")) }

type sandbox struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Port  int    `json:"port"`
}

func (d *daemon) create(id string, env map[string]string) (sandbox, error) {
	body, _ := json.Marshal(map[string]any{"name": id, "envVars": env})
	req, _ := http.NewRequest("POST", d.url("/v1/sandboxes"), strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return sandbox{}, err
	}
	defer resp.Body.Close()
	var sb sandbox
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		return sb, fmt.Errorf("create %s: %d %s", id, resp.StatusCode, b)
	}
	return sb, json.Unmarshal(b, &sb)
}

func (d *daemon) delete(id string) error {
	req, _ := http.NewRequest("POST", d.url("/v1/sandboxes/"+id+"/stop?force=true"), nil)
	if resp, err := httpc.Do(req); err == nil {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("DELETE", d.url("/v1/sandboxes/"+id), nil)
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (d *daemon) list() ([]sandbox, error) {
	resp, err := httpc.Get(d.url("/v1/sandboxes"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct{ Sandboxes []sandbox }
	return out.Sandboxes, json.NewDecoder(resp.Body).Decode(&out)
}

func waitFor(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// feed is one SSE subscription that hands each event's receipt time to
// whoever expects it.
type feed struct {
	resp    *http.Response
	mu      sync.Mutex
	waiters map[string]chan time.Time // "type id" → receipt
	onEvent func(typ, id string, at time.Time)
}

func subscribe(url string) (*feed, error) {
	resp, err := (&http.Client{Transport: bearer{http.DefaultTransport}}).Get(url)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("events: %d", resp.StatusCode)
	}
	f := &feed{resp: resp, waiters: map[string]chan time.Time{}}
	go f.read()
	return f, nil
}

func (f *feed) close() { f.resp.Body.Close() }

func (f *feed) expect(typ, id string) <-chan time.Time {
	c := make(chan time.Time, 1)
	f.mu.Lock()
	f.waiters[typ+" "+id] = c
	f.mu.Unlock()
	return c
}

func (f *feed) read() {
	er := client.NewEventReader(f.resp.Body)
	for {
		ev, err := er.Next()
		if err != nil {
			return
		}
		if ev.Type == "sandboxes_replaced" {
			continue
		}
		at := time.Now()
		// The id is the first "id" inside "sandbox"; avoid a full decode
		// on the hot path.
		data := string(ev.Data)
		i := strings.Index(data, `"sandbox":{"id":"`)
		if i < 0 {
			continue
		}
		rest := data[i+len(`"sandbox":{"id":"`):]
		id := rest[:strings.IndexByte(rest, '"')]
		typ := ev.Type
		f.mu.Lock()
		c := f.waiters[typ+" "+id]
		delete(f.waiters, typ+" "+id)
		on := f.onEvent
		f.mu.Unlock()
		if c != nil {
			c <- at
		}
		if on != nil {
			on(typ, id, at)
		}
	}
}

func await(c <-chan time.Time) (time.Time, error) {
	select {
	case t := <-c:
		return t, nil
	case <-time.After(60 * time.Second):
		return time.Time{}, errors.New("event did not arrive")
	}
}

// pollChild polls the stub's /api/info until it answers 2xx.
func pollChild(cl *http.Client, port int) time.Time {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/api/info"
	for {
		resp, err := cl.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Now()
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

var probe = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func benchReady(c config, d *daemon, r *results) error {
	var floor, answered, child, started []time.Duration
	for i := range c.runs {
		// The floor: the same stub, spawned directly and polled the same way.
		port := d.portHi + 1 + i%50
		cmd := exec.Command(d.bin, "stub-agent")
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "AGENT_SANDBOX_ID=floor")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return err
		}
		floor = append(floor, pollChild(probe, port).Sub(t0))
		cmd.Process.Kill()
		cmd.Wait()

		id := fmt.Sprintf("ready%d", i)
		ev := d.events.expect("sandbox.started", id)
		t0 = time.Now()
		sb, err := d.create(id, nil)
		if err != nil {
			return err
		}
		answered = append(answered, time.Since(t0))
		child = append(child, pollChild(probe, sb.Port).Sub(t0))
		at, err := await(ev)
		if err != nil {
			return err
		}
		started = append(started, at.Sub(t0))
		d.delete(id)
	}
	r.Ready.Floor, r.Ready.Answered = summarize(floor), summarize(answered)
	r.Ready.ChildAnswers, r.Ready.Started = summarize(child), summarize(started)
	return nil
}

// crashOnce kills the child of a started sandbox and times the stopped
// event.
func crashOnce(d *daemon, id string) (time.Duration, error) {
	pid := d.pid(id)
	if pid <= 0 {
		return 0, fmt.Errorf("%s: no pid", id)
	}
	ev := d.events.expect("sandbox.stopped", id)
	t0 := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	at, err := await(ev)
	return at.Sub(t0), err
}

func createStarted(d *daemon, id string, env map[string]string) error {
	ev := d.events.expect("sandbox.started", id)
	if _, err := d.create(id, env); err != nil {
		return err
	}
	_, err := await(ev)
	return err
}

func benchCrash(c config, d *daemon, r *results) error {
	for _, kind := range []struct {
		env map[string]string
		out *stat
	}{{nil, &r.Crash.Plain}, {map[string]string{"STUB_AGENT_GRANDCHILD": "1"}, &r.Crash.Grandchild}} {
		var ds []time.Duration
		for i := range c.runs {
			id := fmt.Sprintf("crash%d", i)
			if err := createStarted(d, id, kind.env); err != nil {
				return err
			}
			lat, err := crashOnce(d, id)
			if err != nil {
				return err
			}
			ds = append(ds, lat)
			d.delete(id)
		}
		*kind.out = summarize(ds)
	}
	// Re-adopted children: their daemon was SIGKILLed and restarted.
	for i := range c.runs {
		if err := createStarted(d, fmt.Sprintf("adopt%d", i), nil); err != nil {
			return err
		}
	}
	d.kill()
	if err := d.start(); err != nil {
		return err
	}
	var ds []time.Duration
	for i := range c.runs {
		lat, err := crashOnce(d, fmt.Sprintf("adopt%d", i))
		if err != nil {
			return err
		}
		ds = append(ds, lat)
	}
	for i := range c.runs {
		d.delete(fmt.Sprintf("adopt%d", i))
	}
	r.Crash.Readopted = summarize(ds)
	return nil
}

// status reads a field of /proc/<pid>/status, in kB for memory fields.
func status(pid int, field string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

func (d *daemon) goroutines() int {
	resp, err := httpc.Get(d.url("/metrics"))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func benchScale(c config, d *daemon, r *results) error {
	pid := d.cmd.Process.Pid
	runtime.GC()
	rss0 := status(pid, "VmRSS")
	var mu sync.Mutex
	remaining := c.scale
	all := make(chan time.Time, 1)
	d.events.mu.Lock()
	d.events.onEvent = func(typ, id string, at time.Time) {
		if typ != "sandbox.started" || !strings.HasPrefix(id, "scale") {
			return
		}
		mu.Lock()
		remaining--
		if remaining == 0 {
			all <- at
		}
		mu.Unlock()
	}
	d.events.mu.Unlock()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c.scale)
	sem := make(chan struct{}, 64)
	for i := range c.scale {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := d.create(fmt.Sprintf("scale%03d", i), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	at, err := await(all)
	if err != nil {
		return fmt.Errorf("not all started: %d left", remaining)
	}
	r.Scale.N = c.scale
	r.Scale.AllStartedMs = float64(at.Sub(t0).Microseconds()) / 1000
	list, err := d.list()
	if err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, sb := range list {
		if seen[sb.Port] {
			r.Scale.PortCollisions++
		}
		seen[sb.Port] = true
	}
	// The daemon's latency: until the whole answer has arrived, without
	// the time this program would take to decode it.
	var lat []time.Duration
	for range 200 {
		t := time.Now()
		resp, err := httpc.Get(d.url("/v1/sandboxes"))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t))
	}
	r.Scale.List = summarize(lat)
	rssN := status(pid, "VmRSS")
	r.Scale.RSSIdleMiB = float64(rss0) / 1024
	r.Scale.RSSAtNMiB = float64(rssN) / 1024
	r.Scale.PerSandboxKiB = float64(rssN-rss0) / float64(c.scale)
	r.Scale.Goroutines = d.goroutines()
	r.Scale.DaemonThreadsAt = status(pid, "Threads")
	d.events.mu.Lock()
	d.events.onEvent = nil
	d.events.mu.Unlock()
	return nil
}

func benchRehydrate(c config, d *daemon, r *results) error {
	// Keep c.rehydrate of the scale test's children, delete the rest.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := c.rehydrate; i < c.scale; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.delete(fmt.Sprintf("scale%03d", i))
		})
	}
	wg.Wait()
	d.kill()
	t0 := time.Now()
	cmd := exec.Command(d.bin, "serve", "--root", d.root, "--listen", d.addr, "--port-range", fmt.Sprintf("%d-%d", d.portLo, d.portHi))
	cmd.Env = daemonEnv("AGENT_CONTROL_PLANE_LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd = cmd
	if err := waitFor(60*time.Second, func() bool { return d.info() == nil }); err != nil {
		return errors.New("restarted daemon did not answer")
	}
	tInfo := time.Since(t0)
	var started int
	if err := waitFor(60*time.Second, func() bool {
		list, err := d.list()
		started = 0
		for _, sb := range list {
			if sb.State == "started" {
				started++
			}
		}
		return err == nil && started == c.rehydrate
	}); err != nil {
		return fmt.Errorf("%d of %d re-adopted", started, c.rehydrate)
	}
	tAll := time.Since(t0)
	r.Rehydrate.N = c.rehydrate
	r.Rehydrate.InfoMs = float64(tInfo.Microseconds()) / 1000
	r.Rehydrate.AllAdoptedMs = float64(tAll.Microseconds()) / 1000
	resp, err := httpc.Get(d.url("/metrics"))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, `agent_control_plane_rehydrations_total{result="adopted"} `); ok {
				r.Rehydrate.AdoptedMetric, _ = strconv.Atoi(v)
			}
		}
	}
	f, err := subscribe(d.url("/v1/events"))
	if err != nil {
		return err
	}
	d.events = f
	// Clean up for the next test.
	for i := range c.rehydrate {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.delete(fmt.Sprintf("scale%03d", i))
		})
	}
	wg.Wait()
	return nil
}

// benchEvents opens many subscribers and, while creates run, times how
// long after a kill -9 each subscriber holds the sandbox.stopped event.
func benchEvents(c config, d *daemon, r *results) error {
	subs := make([]*subscriberLog, c.subscribers)
	feeds := make([]*feed, c.subscribers)
	for i := range subs {
		f, err := subscribe(d.url("/v1/events"))
		if err != nil {
			return err
		}
		s := &subscriberLog{at: map[string]time.Time{}}
		f.onEvent = func(typ, id string, at time.Time) {
			if typ == "sandbox.stopped" {
				s.mu.Lock()
				s.at[id] = at
				s.mu.Unlock()
			}
		}
		subs[i], feeds[i] = s, f
	}
	defer func() {
		for _, f := range feeds {
			f.close()
		}
	}()
	quiet, missedQuiet, err := measureDelivery(c, d, subs, "quiet", nil)
	if err != nil {
		return err
	}
	// Background creates and deletes for the whole measurement.
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("load%d", i%20)
			d.create(id, nil)
			d.delete(id)
		}
	})
	busy, missed, err := measureDelivery(c, d, subs, "ev", cancel)
	cancel()
	bg.Wait()
	if err != nil {
		return err
	}
	r.Events.Subscribers = c.subscribers
	r.Events.Delivery = summarize(busy)
	r.Events.Quiet = summarize(quiet)
	r.Events.Missed = missed + missedQuiet
	return nil
}

type subscriberLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

// measureDelivery kills c.runs fresh sandboxes one at a time and returns,
// for each subscriber and kill, how long after the kill it held the
// sandbox.stopped event.
func measureDelivery(c config, d *daemon, subs []*subscriberLog, prefix string, onErr func()) ([]time.Duration, int, error) {
	var lat []time.Duration
	missed := 0
	for i := range c.runs {
		id := fmt.Sprintf("%s%d", prefix, i)
		if err := createStarted(d, id, nil); err != nil {
			return nil, 0, err
		}
		pid := d.pid(id)
		ev := d.events.expect("sandbox.stopped", id)
		t0 := time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
		if _, err := await(ev); err != nil {
			return nil, 0, err
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, s := range subs {
			for {
				s.mu.Lock()
				at, ok := s.at[id]
				s.mu.Unlock()
				if ok {
					lat = append(lat, at.Sub(t0))
					break
				}
				if time.Now().After(deadline) {
					missed++
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		d.delete(id)
	}
	return lat, missed, nil
}

func goal(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func (r *results) markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Machine: %d CPUs (%s), Linux %s, %s.\n\n", r.Machine.CPUs, r.Machine.Model, r.Machine.Kernel, r.Machine.Go)
	p("| measurement | n | median | p99 | max | goal | |\n|---|---:|---:|---:|---:|---|---|\n")
	row := func(name string, s stat, goalText string, ok *bool) {
		verdict := ""
		if ok != nil {
			verdict = goal(*ok)
		}
		p("| %s | %d | %.2f ms | %.2f ms | %.2f ms | %s | %s |\n", name, s.N, s.Median, s.P99, s.Max, goalText, verdict)
	}
	ready := r.Ready
	childOK := ready.ChildAnswers.Median-ready.Floor.Median <= 1
	startedOK := ready.Started.Median-ready.Floor.Median <= 5
	row("floor: stub spawned directly → answers", ready.Floor, "", nil)
	row("`POST /v1/sandboxes` answered (201, child spawned)", ready.Answered, "", nil)
	row("create → child answers", ready.ChildAnswers, "≤ floor + 1 ms (median)", &childOK)
	row("create → `sandbox.started`", ready.Started, "≤ floor + 5 ms (median)", &startedOK)
	for _, c := range []struct {
		name string
		s    stat
	}{{"kill -9 → `sandbox.stopped` (plain child)", r.Crash.Plain}, {"kill -9 → `sandbox.stopped` (grandchild holds stdout)", r.Crash.Grandchild}, {"kill -9 → `sandbox.stopped` (re-adopted after restart)", r.Crash.Readopted}} {
		ok := c.s.P99 < 10
		row(c.name, c.s, "p99 < 10 ms", &ok)
	}
	listOK := r.Scale.List.P99 < 10
	row(fmt.Sprintf("`GET /v1/sandboxes` with %d sandboxes", r.Scale.N), r.Scale.List, "p99 < 10 ms", &listOK)
	evOK := r.Events.Delivery.P99 < 5
	row(fmt.Sprintf("kill -9 → event at each of %d subscribers, creates running", r.Events.Subscribers), r.Events.Delivery, "p99 < 5 ms", &evOK)
	row(fmt.Sprintf("kill -9 → event at each of %d subscribers, no other load", r.Events.Subscribers), r.Events.Quiet, "", nil)
	p("\nReadiness against the floor (medians): child answers %+.2f ms (×%.2f), `started` %+.2f ms (×%.2f).\n\n",
		ready.ChildAnswers.Median-ready.Floor.Median, ratio(ready.ChildAnswers.Median, ready.Floor.Median),
		ready.Started.Median-ready.Floor.Median, ratio(ready.Started.Median, ready.Floor.Median))
	rssOK := r.Scale.RSSAtNMiB < 40
	adoptOK := r.Rehydrate.AllAdoptedMs < 1000
	p("| scale and restart | value | goal | |\n|---|---:|---|---|\n")
	p("| %d sandboxes created concurrently → all `started` | %.0f ms | | |\n", r.Scale.N, r.Scale.AllStartedMs)
	p("| port collisions | %d | 0 | %s |\n", r.Scale.PortCollisions, goal(r.Scale.PortCollisions == 0))
	p("| daemon RSS idle → at %d | %.1f → %.1f MiB | < 40 MiB | %s |\n", r.Scale.N, r.Scale.RSSIdleMiB, r.Scale.RSSAtNMiB, goal(rssOK))
	p("| daemon memory per sandbox | %.1f KiB | | |\n", r.Scale.PerSandboxKiB)
	p("| daemon goroutines / OS threads at %d | %d / %d | | |\n", r.Scale.N, r.Scale.Goroutines, r.Scale.DaemonThreadsAt)
	p("| SIGKILL with %d live children → restart → `/v1/info` answers | %.0f ms | | |\n", r.Rehydrate.N, r.Rehydrate.InfoMs)
	p("| … → all %d verified and re-adopted (metrics: %d adopted) | %.0f ms | < 1 s | %s |\n", r.Rehydrate.N, r.Rehydrate.AdoptedMetric, r.Rehydrate.AllAdoptedMs, goal(adoptOK))
	p("| events missed by subscribers | %d | 0 | %s |\n", r.Events.Missed, goal(r.Events.Missed == 0))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
