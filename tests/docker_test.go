// This file is long because its tests share the engine, the stub image
// and the helpers declared here.

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// stubImage is the image the docker tests run.
const stubImage = dockertest.StubImage

// engine returns a client of the local Docker engine with the stub image
// built, or skips saying why there is none.
func engine(t *testing.T) *client.Client { return dockertest.Engine(t) }

// dockerDaemon starts a daemon whose docker runtime runs the stub image;
// its containers are removed when the test ends.
func dockerDaemon(t *testing.T, c *client.Client, env ...string) *testenv.Daemon {
	t.Helper()
	d := startDaemon(t, append([]string{"ACP_TEST_DAEMON_ONLY=must-not-leak"}, env...)...)
	owner := conf.InstanceName(d.Root)
	t.Cleanup(func() {
		ctx := context.Background()
		list, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner+"="+owner))})
		for _, ct := range list {
			c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
		}
		c.NetworkRemove(ctx, owner) // the engine has few address pools
	})
	return d
}

// A docker snapshot: a create that names it runs on docker without
// saying so, with the snapshot's image, argv and env.
func TestDockerSnapshot(t *testing.T) {
	c := engine(t)
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: `
[snapshots.boat]
runtime = "docker"
image = "` + stubImage + `"
command = ["/agent-control-plane", "stub-agent"]
env = { STUB_AGENT_PRINT = "printed as the snapshot says" }
stop_grace = "1s"
`})
	t.Cleanup(func() { c.NetworkRemove(context.Background(), conf.InstanceName(d.Root)) })
	t.Cleanup(func() { call(t, d, "DELETE", "/v1/sandboxes/b1", "") })
	code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"b1","snapshot":"boat"}`)
	if code != 201 || !strings.Contains(string(b), `"runtime":"docker"`) || !strings.Contains(string(b), `"snapshot":"boat"`) {
		t.Fatalf("create from a docker snapshot: %d %s", code, b)
	}
	waitState(t, d, "b1", "started")
	ins, err := c.ContainerInspect(context.Background(), containerOf(t, d, "b1"))
	if err != nil {
		t.Fatal(err)
	}
	if ins.Config.Image != stubImage || strings.Join(ins.Config.Entrypoint, " ") != "/agent-control-plane stub-agent" || len(ins.Config.Cmd) != 0 {
		t.Errorf("container runs %s %v %v", ins.Config.Image, ins.Config.Entrypoint, ins.Config.Cmd)
	}
	testenv.Eventually(t, "the snapshot's env reaches the container", func() bool {
		_, b := call(t, d, "GET", "/v1/sandboxes/b1/entrypoint-logs", "")
		return strings.Contains(string(b), "printed as the snapshot says")
	})
	// Named with another runtime, it is refused.
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"b2","snapshot":"boat","runtime":"native"}`); code != 400 {
		t.Errorf("snapshot boat on native: %d %s", code, b)
	}
	if r := record(t, d, "b1"); r.StopGraceMs != 1000 || r.Snapshot != "boat" {
		t.Errorf("record: grace %d, snapshot %q", r.StopGraceMs, r.Snapshot)
	}
}

func containerOf(t *testing.T, d *testenv.Daemon, id string) string {
	t.Helper()
	r := record(t, d, id)
	if r.Handle == nil {
		t.Fatalf("%s: no handle", id)
	}
	cid, err := docker.ContainerID(*r.Handle)
	if err != nil {
		t.Fatal(err)
	}
	return cid
}

func ourContainers(t *testing.T, c *client.Client, d *testenv.Daemon) int {
	t.Helper()
	list, err := c.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner+"="+conf.InstanceName(d.Root)))})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// A docker sandbox behaves as a native one: started, answering on its
// port (loopback only), limits and labels on the container, env rewritten
// and nothing of the daemon's own, logs, resize, a restart, and a stop
// that leaves no container.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestDockerLifecycle(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"d1","runtime":"docker","snapshot":"`+stubImage+`","cpu":0.5,"memory":0.25,"pids":100,
		"labels":{"origin":"test"},
		"envVars":{"STUB_AGENT_SERVE_ENV":"1","STUB_AGENT_PRINT":"hello from the container","HOCUSPOCUS_URL":"ws://localhost:1234/doc","OTHER_URL":"http://localhost:9"}}`)
	info := waitState(t, d, "d1", "started")
	cid := containerOf(t, d, "d1")

	// The preview answers through the published port.
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/env", info.Port))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	json.NewDecoder(res.Body).Decode(&env)
	res.Body.Close()
	joined := strings.Join(env, "\n")
	for _, want := range []string{"HOCUSPOCUS_URL=ws://host.docker.internal:1234/doc", "OTHER_URL=http://localhost:9", "PORT=4000", "AGENT_SANDBOX_ID=d1", "AGENT_WORKSPACE_DIR=/workspace"} {
		if !strings.Contains(joined, want) {
			t.Errorf("container env lacks %s:\n%s", want, joined)
		}
	}
	for _, leak := range []string{"ACP_TEST_DAEMON_ONLY", "XDG_STATE_HOME", "AGENT_CONTROL_PLANE_TOKEN"} {
		if strings.Contains(joined, leak) {
			t.Errorf("the daemon's %s leaked into the container", leak)
		}
	}

	ins, err := c.ContainerInspect(context.Background(), cid)
	if err != nil {
		t.Fatal(err)
	}
	r := ins.HostConfig.Resources
	if r.NanoCPUs != 5e8 || r.Memory != 256<<20 || r.PidsLimit == nil || *r.PidsLimit != 100 {
		t.Errorf("limits on the container: cpu %d memory %d pids %v", r.NanoCPUs, r.Memory, r.PidsLimit)
	}
	for _, b := range ins.HostConfig.PortBindings {
		for _, pb := range b {
			if pb.HostIP != "127.0.0.1" {
				t.Errorf("port bound to %q, want loopback only", pb.HostIP)
			}
		}
	}
	if ins.Config.Labels["origin"] != "test" || ins.Config.Labels[docker.LabelSandbox] != "d1" {
		t.Errorf("labels %v", ins.Config.Labels)
	}
	if ins.HostConfig.RestartPolicy.Name != "no" {
		t.Errorf("restart policy %q", ins.HostConfig.RestartPolicy.Name)
	}

	testenv.Eventually(t, "entrypoint logs", func() bool {
		_, b := call(t, d, "GET", "/v1/sandboxes/d1/entrypoint-logs", "")
		return strings.Contains(string(b), "hello from the container")
	})

	if u := get(t, d, "d1").Usage; u == nil || u.Pids < 1 || u.MemoryBytes <= 0 {
		t.Errorf("usage of a running container: %+v", u)
	}

	if code, b := call(t, d, "POST", "/v1/sandboxes/d1/resize", `{"cpu":1}`); code != 200 {
		t.Fatalf("resize: %d %s", code, b)
	}
	if ins, _ := c.ContainerInspect(context.Background(), cid); ins.HostConfig.NanoCPUs != 1e9 {
		t.Errorf("after resize the container has %d nano-CPUs", ins.HostConfig.NanoCPUs)
	}
	// More CPUs than the engine has: a 400 naming its range, not a 500.
	if code, b := call(t, d, "POST", "/v1/sandboxes/d1/resize", `{"cpu":1024}`); code != 400 || !strings.Contains(string(b), "limits_unsupported") || !strings.Contains(string(b), "CPUs") {
		t.Errorf("resize past the engine's CPUs: %d %s", code, b)
	}

	// Restart: the container is re-adopted.
	d.Kill()
	d.Start()
	waitState(t, d, "d1", "started")
	if got := containerOf(t, d, "d1"); got != cid {
		t.Fatalf("after restart the record names %s, want %s", got, cid)
	}

	if code, b := call(t, d, "POST", "/v1/sandboxes/d1/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	testenv.Eventually(t, "container removed", func() bool {
		_, err := c.ContainerInspect(context.Background(), cid)
		return client.IsErrNotFound(err)
	})
}

// A container that exits at start stops its sandbox with its exit code; one
// killed from outside stops it with the reason.
func TestDockerExits(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"early","runtime":"docker","snapshot":"`+stubImage+`","envVars":{"STUB_AGENT_EXIT_AFTER_MS":"1","STUB_AGENT_READY_DELAY_MS":"2000"}}`)
	if info := waitState(t, d, "early", "stopped"); info.ErrorReason != "exited_during_startup: exit code 3" {
		t.Errorf("errorReason %q", info.ErrorReason)
	}

	create(t, d, `{"name":"victim","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "victim", "started")
	cid := containerOf(t, d, "victim")
	t0 := time.Now()
	if err := c.ContainerKill(context.Background(), cid, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	info := waitState(t, d, "victim", "stopped")
	t.Logf("killed from outside → stopped in %v", time.Since(t0))
	if info.ErrorReason != "killed by signal SIGKILL" {
		t.Errorf("errorReason %q", info.ErrorReason)
	}
	testenv.Eventually(t, "no container left", func() bool { return ourContainers(t, c, d) == 0 })
}

// A container over its memory limit ends as an OOM kill, and says so.
func TestDockerOOM(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"hog","runtime":"docker","snapshot":"`+stubImage+`","memory":0.0625,"envVars":{"STUB_AGENT_ALLOC_MB":"1024"}}`)
	info := waitState(t, d, "hog", "stopped")
	if !strings.Contains(info.ErrorReason, "out of memory") {
		t.Fatalf("errorReason %q, want an OOM kill", info.ErrorReason)
	}
}

// A missing image is a 400 that names it, and nothing is left behind.
func TestDockerMissingImage(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	// From the CLI too, and an image that exists works there.
	if code, _, errOut := cli(t, d, "create", "--runtime", "docker", "--snapshot", "agent-control-plane-missing:cli", "cli-ghost"); code == 0 || !strings.Contains(errOut, "agent-control-plane-missing:cli") {
		t.Errorf("CLI create with a missing image: %d %s", code, errOut)
	}
	if code, out, errOut := cli(t, d, "create", "--runtime", "docker", "--snapshot", stubImage, "--wait", "cli-boat"); code != 0 {
		t.Errorf("CLI docker create: %d %s %s", code, out, errOut)
	}
	cli(t, d, "rm", "cli-boat")
	code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"ghost","runtime":"docker","snapshot":"agent-control-plane-missing:nope"}`)
	if code != 400 || !strings.Contains(string(b), "image_not_found") || !strings.Contains(string(b), "agent-control-plane-missing:nope") {
		t.Fatalf("create with a missing image: %d %s", code, b)
	}
	if exists(filepath.Join(d.Root, "ghost")) {
		t.Error("a refused create left its directory")
	}
	if n := ourContainers(t, c, d); n != 0 {
		t.Errorf("%d containers left", n)
	}
	if code, _ := call(t, d, "GET", "/v1/sandboxes/ghost", ""); code != 404 {
		t.Errorf("the refused sandbox exists: %d", code)
	}
}

// With the engine out of reach, native sandboxes work and docker creates
// say which socket was tried.
func TestDockerEngineUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-docker.sock")
	d := startDaemon(t, "DOCKER_HOST=unix://"+sock)
	code, b := call(t, d, "GET", "/v1/info", "")
	var info struct {
		Unavailable map[string]string `json:"unavailable"`
	}
	if code != 200 || json.Unmarshal(b, &info) != nil || !strings.Contains(info.Unavailable["docker"], sock) {
		t.Fatalf("info: %d %s", code, b)
	}
	code, b = call(t, d, "POST", "/v1/sandboxes", `{"name":"boat","runtime":"docker","snapshot":"x:y"}`)
	if code != 503 || !strings.Contains(string(b), "runtime_unavailable") || !strings.Contains(string(b), sock) {
		t.Fatalf("docker create, engine down: %d %s", code, b)
	}
	if exists(filepath.Join(d.Root, "boat")) {
		t.Error("a refused create left its directory")
	}
	create(t, d, `{"name":"native-still"}`)
	waitState(t, d, "native-still", "started")
}

// The engine's event stream drops (every connection to the engine cut)
// while a container dies: the daemon subscribes again from the last event
// it saw, and the sandbox stops with its reason.
func TestDockerEventStreamDrop(t *testing.T) {
	c := engine(t)
	target := strings.TrimPrefix(c.DaemonHost(), "unix://")
	if !strings.HasPrefix(c.DaemonHost(), "unix://") {
		t.Skipf("the engine is not on a unix socket (%s)", c.DaemonHost())
	}
	proxy := testenv.NewProxy(t, "unix", target)
	sock := proxy.Addr
	d := dockerDaemon(t, c, "DOCKER_HOST=unix://"+sock)
	create(t, d, `{"name":"drop","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "drop", "started")
	cid := containerOf(t, d, "drop")
	proxy.Cut()
	if err := c.ContainerKill(context.Background(), cid, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if info := waitState(t, d, "drop", "stopped"); info.ErrorReason != "killed by signal SIGKILL" {
		t.Errorf("errorReason %q", info.ErrorReason)
	}
	if !strings.Contains(d.Log(), "docker event stream dropped") {
		t.Errorf("the stream never dropped, so this proved nothing:\n%s", d.Log())
	}
}

// A container of this daemon that no record names (its daemon killed
// before the record, or between the end and the delete) is removed at
// start, proved by its name and seal; live sandboxes' containers are kept;
// and a container run by hand from an image committed from a sandbox,
// which inherits every label, is left alone.
func TestDockerPrunesOnlyWhatItProves(t *testing.T) {
	c := engine(t)
	ctx := context.Background()
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"kept","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "kept", "started")
	seal, err := supervisor.RootSeal(d.Root)
	if err != nil {
		t.Fatal(err)
	}
	owner := conf.InstanceName(d.Root)
	marker := "stray.0123456789abcdef01234567"
	stray, err := c.ContainerCreate(ctx, &container.Config{Image: stubImage,
		Labels: map[string]string{docker.LabelOwner: owner, docker.LabelMarker: marker, docker.LabelSeal: seal(marker)}},
		nil, nil, nil, "acp-"+marker)
	if err != nil {
		t.Fatal(err)
	}
	// Labels without the seal, or a seal under another name, prove
	// nothing.
	forged, err := c.ContainerCreate(ctx, &container.Config{Image: stubImage,
		Labels: map[string]string{docker.LabelOwner: owner, docker.LabelMarker: "forged.0123456789abcdef01234567"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ContainerRemove(ctx, forged.ID, container.RemoveOptions{Force: true}) })
	commit, err := c.ContainerCommit(ctx, containerOf(t, d, "kept"), container.CommitOptions{Reference: "acp-committed:test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ImageRemove(ctx, commit.ID, image.RemoveOptions{Force: true}) })
	mine, err := c.ContainerCreate(ctx, &container.Config{Image: "acp-committed:test", Entrypoint: []string{"/agent-control-plane", "version"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ContainerRemove(ctx, mine.ID, container.RemoveOptions{Force: true}) })
	if ins, _ := c.ContainerInspect(ctx, mine.ID); ins.Config.Labels[docker.LabelSeal] == "" {
		t.Fatal("the committed image did not carry the labels: this proves nothing")
	}
	d.Kill()
	d.Start()
	waitState(t, d, "kept", "started")
	testenv.Eventually(t, "the sealed stray removed", func() bool {
		_, err := c.ContainerInspect(ctx, stray.ID)
		return client.IsErrNotFound(err)
	})
	for _, id := range []string{mine.ID, forged.ID, containerOf(t, d, "kept")} {
		if _, err := c.ContainerInspect(ctx, id); err != nil {
			t.Errorf("container %.12s was removed: %v", id, err)
		}
	}
	if !strings.Contains(d.Log(), "not its seal") {
		t.Errorf("the containers left alone were not logged:\n%s", d.Log())
	}
}

// The engine's connection is cut while a create is under way, after the
// engine made (or started) the container and before the daemon heard so:
// the client gets a 503, and the container, the directory and the name
// are gone, free for the next create.
func TestDockerCreateAcrossAnEngineDrop(t *testing.T) {
	c := engine(t)
	if !strings.HasPrefix(c.DaemonHost(), "unix://") {
		t.Skipf("the engine is not on a unix socket (%s)", c.DaemonHost())
	}
	proxy := testenv.NewProxy(t, "unix", strings.TrimPrefix(c.DaemonHost(), "unix://"))
	d := dockerDaemon(t, c, "DOCKER_HOST=unix://"+proxy.Addr)
	for _, step := range []string{"/containers/create", "/start"} {
		cut := proxy.CutOn(step)
		code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"cut","runtime":"docker","snapshot":"`+stubImage+`"}`)
		select {
		case <-cut:
		default:
			t.Fatalf("%s: the connection was never cut, so this proves nothing (%d %s)", step, code, b)
		}
		if code != 503 || !strings.Contains(string(b), "runtime_unavailable") {
			t.Errorf("%s: create across the drop: %d %s", step, code, b)
		}
		testenv.Eventually(t, "no container left after the drop at "+step, func() bool { return ourContainers(t, c, d) == 0 })
		if exists(filepath.Join(d.Root, "cut")) {
			t.Errorf("%s: the sandbox's directory was left (or made again by the engine)", step)
		}
		create(t, d, `{"name":"cut","runtime":"docker","snapshot":"`+stubImage+`"}`)
		waitState(t, d, "cut", "started")
		if code, b := call(t, d, "DELETE", "/v1/sandboxes/cut", ""); code != 204 {
			t.Fatalf("delete: %d %s", code, b)
		}
	}
}

// Two docker sandboxes cannot reach each other on the daemon's network,
// while both answer on their published ports and each reaches the host.
func TestDockerSandboxesApart(t *testing.T) {
	c := engine(t)
	ctx := context.Background()
	d := dockerDaemon(t, c)
	host := closingListener(t, "0.0.0.0:0")
	create(t, d, `{"name":"apart-b","runtime":"docker","snapshot":"`+stubImage+`"}`)
	b := waitState(t, d, "apart-b", "started")
	ins, err := c.ContainerInspect(ctx, containerOf(t, d, "apart-b"))
	if err != nil {
		t.Fatal(err)
	}
	ep := ins.NetworkSettings.Networks[conf.InstanceName(d.Root)]
	if ep == nil || ep.IPAddress == "" {
		t.Fatalf("apart-b is not on the daemon's network: %v", ins.NetworkSettings.Networks)
	}
	peer := net.JoinHostPort(ep.IPAddress, "4000")
	hostAddr := "host.docker.internal:" + strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
	create(t, d, `{"name":"apart-a","runtime":"docker","snapshot":"`+stubImage+`","envVars":{"STUB_AGENT_DIAL":"`+hostAddr+`,`+peer+`"}}`)
	a := waitState(t, d, "apart-a", "started")
	for _, sb := range []sandboxInfo{a, b} {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/info", sb.Port))
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s does not answer on its published port: %v", sb.ID, err)
		}
		res.Body.Close()
	}
	var logs string
	testenv.Eventually(t, "apart-a tried both", func() bool {
		_, out := call(t, d, "GET", "/v1/sandboxes/apart-a/entrypoint-logs", "")
		logs = string(out)
		return strings.Contains(logs, "dial "+peer+": ")
	})
	if !strings.Contains(logs, "dial "+hostAddr+": ok") {
		t.Errorf("apart-a could not reach the host, so the network proves nothing:\n%s", logs)
	}
	if strings.Contains(logs, "dial "+peer+": ok") {
		t.Errorf("apart-a reached apart-b at %s:\n%s", peer, logs)
	}
}

// The daemon's network removed behind its back (docker network prune) is
// made again at the next create.
func TestDockerNetworkMadeAgain(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"net1","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "net1", "started")
	if code, b := call(t, d, "DELETE", "/v1/sandboxes/net1", ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if err := c.NetworkRemove(context.Background(), conf.InstanceName(d.Root)); err != nil {
		t.Fatal(err)
	}
	create(t, d, `{"name":"net2","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "net2", "started")
}

// A daemon killed after its last docker sandbox went leaves its network
// behind (only Close removes it); the next daemon of the root removes it
// as it starts, and makes it again for its first docker create.
func TestDockerNetworkOfAKilledDaemonRemoved(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	ctx := context.Background()
	netName := conf.InstanceName(d.Root)
	create(t, d, `{"name":"left1","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "left1", "started")
	if code, b := call(t, d, "DELETE", "/v1/sandboxes/left1", ""); code != 204 {
		t.Fatalf("delete: %d %s", code, b)
	}
	d.Kill()
	if _, err := c.NetworkInspect(ctx, netName, network.InspectOptions{}); err != nil {
		t.Fatalf("the killed daemon's network: %v, want it left behind", err)
	}
	d.Start()
	if _, err := c.NetworkInspect(ctx, netName, network.InspectOptions{}); !client.IsErrNotFound(err) {
		t.Fatalf("the network after the next start: %v, want it removed", err)
	}
	create(t, d, `{"name":"left2","runtime":"docker","snapshot":"`+stubImage+`"}`)
	waitState(t, d, "left2", "started")
	if _, err := c.NetworkInspect(ctx, netName, network.InspectOptions{}); err != nil {
		t.Fatalf("the network after a create: %v", err)
	}
}

// The copy of a container's output resumes, after a daemon restart, right
// after the last line it copied (the engine's time of that line, kept on
// the log file), so no line is copied twice, and none lost.
func TestDockerLogsNotCopiedTwiceAcrossARestart(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	const n = 5
	for i := range n {
		create(t, d, fmt.Sprintf(`{"name":"log%d","runtime":"docker","snapshot":"%s","envVars":{"STUB_AGENT_PRINT":"printed once by log%d"}}`, i, stubImage, i))
	}
	for i := range n {
		waitState(t, d, fmt.Sprintf("log%d", i), "started")
		testenv.Eventually(t, "the line copied", func() bool {
			b, _ := os.ReadFile(filepath.Join(d.Root, fmt.Sprintf("log%d", i), "stdout.log"))
			return strings.Contains(string(b), fmt.Sprintf("printed once by log%d", i))
		})
	}
	d.Kill()
	d.Start()
	for i := range n {
		id := fmt.Sprintf("log%d", i)
		waitState(t, d, id, "started")
		if code, b := call(t, d, "POST", "/v1/sandboxes/"+id+"/stop", ""); code != 200 {
			t.Fatalf("stop %s: %d %s", id, code, b)
		}
	}
	// Each container is removed only after its copy ended.
	testenv.Eventually(t, "the containers removed", func() bool { return ourContainers(t, c, d) == 0 })
	for i := range n {
		b, _ := os.ReadFile(filepath.Join(d.Root, fmt.Sprintf("log%d", i), "stdout.log"))
		if got := strings.Count(string(b), fmt.Sprintf("printed once by log%d", i)); got != 1 {
			t.Errorf("log%d's line is in its log %d times:\n%s", i, got, b)
		}
		if regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT`).Match(b) {
			t.Errorf("log%d's log holds the engine's timestamps:\n%s", i, b)
		}
	}
}

// A stopped docker sandbox starts again in place: a new container over the
// same workspace, with the same variables and limits.
func TestDockerStartAgain(t *testing.T) {
	c := engine(t)
	d := dockerDaemon(t, c)
	create(t, d, `{"name":"again","runtime":"docker","snapshot":"`+stubImage+`","pids":100,"envVars":{"STUB_AGENT_SERVE_ENV":"1","KEPT":"yes"}}`)
	waitState(t, d, "again", "started")
	first := containerOf(t, d, "again")
	if err := os.WriteFile(filepath.Join(d.Root, "again", "workspace", "notes.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes/again/stop", ""); code != 200 {
		t.Fatalf("stop: %d %s", code, b)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes/again/start", ""); code != 200 {
		t.Fatalf("start again: %d %s", code, b)
	}
	info := waitState(t, d, "again", "started")
	second := containerOf(t, d, "again")
	if second == first {
		t.Fatal("the same container: the first was not removed at stop")
	}
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/env", info.Port))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	json.NewDecoder(res.Body).Decode(&env)
	res.Body.Close()
	if !slices.Contains(env, "KEPT=yes") {
		t.Errorf("the variables after the start: %v", env)
	}
	ins, err := c.ContainerInspect(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if p := ins.HostConfig.Resources.PidsLimit; p == nil || *p != 100 {
		t.Errorf("the limit after the start: %v", p)
	}
	if len(ins.Mounts) != 1 || ins.Mounts[0].Source != filepath.Join(d.Root, "again", "workspace") {
		t.Errorf("mounts %+v, want the same workspace", ins.Mounts)
	}
}

// make docker-stub builds the stub image with nothing pulled, from the
// Dockerfile the tests use.
func TestMakeDockerStub(t *testing.T) {
	c := engine(t)
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI: make docker-stub runs `docker build`")
	}
	const tag = "agent-control-plane-stub:maketest"
	cmd := exec.Command("make", "-C", "..", "docker-stub", "STUB_IMAGE="+tag)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make docker-stub: %v\n%s", err, out)
	}
	t.Cleanup(func() { c.ImageRemove(context.Background(), tag, image.RemoveOptions{}) })
	ins, err := c.ImageInspect(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if ep := ins.Config.Entrypoint; len(ep) != 2 || ep[1] != "stub-agent" {
		t.Errorf("entrypoint %v", ep)
	}
}
