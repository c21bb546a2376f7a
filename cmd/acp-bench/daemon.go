package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-control-plane/agent-control-plane/cgroup"
	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/conf/auth"
	"github.com/agent-control-plane/agent-control-plane/proc"
	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/native"
)

// daemon is the agent-control-plane under test.
type daemon struct {
	bin, root, addr string
	portLo, portHi  int
	env             []string // besides daemonEnv's
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

// start runs the daemon and subscribes to its events.
func (d *daemon) start() error {
	if err := d.spawn(30 * time.Second); err != nil {
		return err
	}
	return d.subscribe()
}

// spawn starts the daemon process and waits until it answers /v1/info.
func (d *daemon) spawn(limit time.Duration) error {
	cmd := exec.Command(d.bin, "serve", "--root", d.root, "--listen", d.addr,
		"--port-range", fmt.Sprintf("%d-%d", d.portLo, d.portHi))
	cmd.Env = append(daemonEnv("AGENT_CONTROL_PLANE_STOP_GRACE_MS=2000", "AGENT_CONTROL_PLANE_LOG_LEVEL=warn"), d.env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd = cmd
	if err := waitFor(limit, func() bool { return d.info() == nil }); err != nil {
		return errors.New("daemon did not answer /v1/info")
	}
	return nil
}

// subscribe (re)opens the daemon's event feed.
func (d *daemon) subscribe() error {
	f, err := subscribe("http://" + d.addr)
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
func (d *daemon) kill() { d.end(syscall.SIGKILL) }

// end closes the event feed, sends the daemon sig and waits for it to
// exit (SIGKILL after 30 s).
func (d *daemon) end(sig syscall.Signal) {
	if d.events != nil {
		d.events.close()
	}
	d.cmd.Process.Signal(sig)
	t := time.AfterFunc(30*time.Second, func() { d.cmd.Process.Kill() })
	defer t.Stop()
	d.cmd.Wait()
}

func (d *daemon) cleanup() {
	if d.cmd != nil && d.cmd.ProcessState == nil {
		// A daemon told to stop closes as it does for a user: its docker
		// runtime removes its network, which nothing else would (a new
		// root, and so a new network, every run).
		d.end(syscall.SIGTERM)
	}
	// Kill every child by its marker, each verified through its pidfd
	// first (a pid read from a record may have been reused since).
	recs, _ := filepath.Glob(filepath.Join(d.root, "*", supervisor.RecordFile))
	var markers []string
	for _, p := range recs {
		if rec, err := readRecord(p); err == nil && rec.Marker != "" {
			markers = append(markers, rec.Marker)
		}
	}
	proc.KillMarked(markers...)
	// And remove their cgroups, as the daemon would have.
	cg, _ := cgroup.Detect(cgroup.Options{Name: conf.InstanceName(d.root)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cg.Sweep(ctx, markers)
	cg.Prune()
	cg.Close()
}

func readRecord(path string) (supervisor.Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return supervisor.Record{}, err
	}
	return supervisor.DecodeRecord(b)
}

// pid is the pid of sandbox id's child, or 0 when its record names none.
func (d *daemon) pid(id string) int {
	rec, err := readRecord(filepath.Join(d.root, id, supervisor.RecordFile))
	if err != nil || rec.Handle == nil {
		return 0
	}
	pid, _ := native.PID(*rec.Handle)
	return pid
}

type sandbox struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Port  int    `json:"port"`
}

func (d *daemon) create(id string, env map[string]string) (sandbox, error) {
	return d.createWith(map[string]any{"name": id, "envVars": env})
}

// createWith creates a sandbox from a whole request body.
func (d *daemon) createWith(body map[string]any) (sandbox, error) {
	id := body["name"]
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", d.url("/v1/sandboxes"), strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return sandbox{}, err
	}
	defer resp.Body.Close()
	var sb sandbox
	b, _ = io.ReadAll(resp.Body)
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
	var out struct{ Sandboxes []sandbox }
	err := getJSON(d.url("/v1/sandboxes"), &out)
	return out.Sandboxes, err
}

// getJSON decodes the answer to GET url.
func getJSON(url string, v any) error {
	resp, err := httpc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitFor polls cond every 200 µs (the bench's resolution) until it holds
// or limit passes.
func waitFor(limit time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := probe.Backoff{Initial: 200 * time.Microsecond}.Until(ctx, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		return errors.New("timed out")
	}
	return nil
}

// metrics is the daemon's /metrics, by series (name and labels as
// written).
func (d *daemon) metrics() (map[string]float64, error) {
	resp, err := httpc.Get(d.url("/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); i > 0 && err == nil {
			out[l[:i]] = v
		}
	}
	return out, nil
}

// stepsBetween is the mean time in ms of each create step over the
// creates that succeeded between two readings of the metrics.
func stepsBetween(before, after map[string]float64) map[string]float64 {
	const ok = `agent_control_plane_sandbox_creates_total{result="ok"}`
	n := after[ok] - before[ok]
	out := map[string]float64{}
	if n <= 0 {
		return out
	}
	for _, step := range supervisor.CreateSteps {
		k := `agent_control_plane_sandbox_create_step_seconds_total{step="` + step + `"}`
		out[step] = (after[k] - before[k]) / n * 1000
	}
	return out
}
