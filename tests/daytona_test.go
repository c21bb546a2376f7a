package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/tests/daytonaclient"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// daytonaDoc is Daytona's own API document, the contract of /api.
const daytonaDoc = "testdata/daytona/daytona-api.yaml"

// daytonaClient is the generated client of d's /api, as an SDK sets it
// up, each exchange checked.
func daytonaClient(t *testing.T, d *testenv.Daemon) (*daytonaclient.ClientWithResponses, *daytonaChecker) {
	chk := newDaytonaChecker(t)
	dc, err := daytonaclient.NewClientWithResponses(d.URL+"/api",
		daytonaclient.WithHTTPClient(&http.Client{Transport: chk, Timeout: 2 * time.Minute}),
		daytonaclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+d.Token)
			r.Header.Set("X-Daytona-Source", "sdk-go")
			r.Header.Set("X-Daytona-SDK-Version", "0.190.0")
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return dc, chk
}

// daytonaFlow is what one run of the SDK's calls needs to know of the
// runtime under it.
type daytonaFlow struct {
	snapshot  string // "" for the daemon's default
	agentPort func(t *testing.T, d *testenv.Daemon, id string) int
	extraPort int // a second port the agent opens
}

// runDaytonaFlow drives /api as Daytona's SDKs do, with a client generated
// from Daytona's document: create without a name (env and labels), poll
// every ~100 ms until started, get by name, list by label, replace
// labels, set intervals, last-activity, preview the agent's port and a
// second one, stop, start (the workspace kept), delete, 404.
//
// It is long because it is Daytona's client driving one sandbox's whole
// life, each call on what the one before did.
func runDaytonaFlow(t *testing.T, d *testenv.Daemon, f daytonaFlow) {
	ctx := testenv.Context(t)
	dc, chk := daytonaClient(t, d)
	must := func(what string, status int, body []byte, err error, want int) {
		t.Helper()
		if err != nil || status != want {
			t.Fatalf("%s: %d %v %s", what, status, err, body)
		}
	}

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	env := map[string]string{"NODE_ENV": "development", "STUB_AGENT_EXTRA_PORT": strconv.Itoa(f.extraPort), "GITHUB_TOKEN": "ghp_" + strings.Repeat("a", 36)}
	labels := map[string]string{"suite": "daytona", "run": run}
	body := daytonaclient.CreateSandbox{Env: &env, Labels: &labels}
	if f.snapshot != "" {
		body.Snapshot = &f.snapshot
	}
	cr, err := dc.CreateSandboxWithResponse(ctx, nil, body)
	must("create", cr.StatusCode(), cr.Body, err, 200)
	sb := *cr.JSON200
	id := sb.Id
	if sb.Name != id || sb.Env["NODE_ENV"] != "[REDACTED]" || sb.Env["GITHUB_TOKEN"] != "[REDACTED]" || sb.Target != "local" || sb.NetworkBlockAll {
		t.Fatalf("create answer: %s", cr.Body)
	}
	// The SDK's wait: every ~100 ms until started; error ends it.
	var polls int
	testenv.Eventually(t, "started", func() bool {
		polls++
		g, err := dc.GetSandboxWithResponse(ctx, id, nil)
		must("get", g.StatusCode(), g.Body, err, 200)
		if st := *g.JSON200.State; st == daytonaclient.SandboxStateError || st == daytonaclient.SandboxStateBuildFailed {
			t.Fatalf("the sandbox failed to start: %s", g.Body)
		}
		if *g.JSON200.State != daytonaclient.SandboxStateStarted {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	byName, err := dc.GetSandboxWithResponse(ctx, sb.Name, nil)
	must("get by name", byName.StatusCode(), byName.Body, err, 200)

	lj := `{"run":"` + run + `"}`
	ls, err := dc.ListSandboxesWithResponse(ctx, &daytonaclient.ListSandboxesParams{Labels: &lj, States: &[]daytonaclient.SandboxState{daytonaclient.SandboxStateStarted, daytonaclient.SandboxStateStarting}})
	must("list", ls.StatusCode(), ls.Body, err, 200)
	if len(ls.JSON200.Items) != 1 || ls.JSON200.Items[0].Id != id || ls.JSON200.NextCursor != nil {
		t.Fatalf("list by label: %s", ls.Body)
	}
	rl, err := dc.ReplaceLabelsWithResponse(ctx, id, nil, daytonaclient.SandboxLabels{Labels: map[string]string{"suite": "daytona", "run": run, "phase": "two"}})
	must("replace labels", rl.StatusCode(), rl.Body, err, 200)
	as, err := dc.SetAutostopIntervalWithResponse(ctx, id, 30, nil)
	must("autostop", as.StatusCode(), as.Body, err, 200)
	aa, err := dc.SetAutoArchiveIntervalWithResponse(ctx, id, 60, nil)
	must("autoarchive", aa.StatusCode(), aa.Body, err, 200)
	ad, err := dc.SetAutoDeleteIntervalWithResponse(ctx, id, -1, nil)
	must("autodelete", ad.StatusCode(), ad.Body, err, 200)
	if s := ad.JSON200; s.Labels["phase"] != "two" || *s.AutoStopInterval != 30 || *s.AutoArchiveInterval != 60 || *s.AutoDeleteInterval != -1 {
		t.Fatalf("settings: %s", ad.Body)
	}
	la, err := dc.UpdateLastActivityWithResponse(ctx, id, nil)
	must("last-activity", la.StatusCode(), la.Body, err, 201)
	tp, err := dc.GetToolboxProxyUrlWithResponse(ctx, id, nil)
	must("toolbox-proxy-url", tp.StatusCode(), tp.Body, err, 200)
	if tp.JSON200.Url != d.URL+"/api/toolbox" {
		t.Fatalf("toolbox proxy URL %s", tp.JSON200.Url)
	}

	// Previews: the agent's port and the second one, with the token.
	preview := func(port int, path string) string {
		t.Helper()
		pv, err := dc.GetPortPreviewUrlWithResponse(ctx, id, float32(port), nil)
		must("preview-url", pv.StatusCode(), pv.Body, err, 200)
		req, _ := http.NewRequest("GET", pv.JSON200.Url+path, nil)
		req.Header.Set("X-Daytona-Preview-Token", pv.JSON200.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("preview of port %d: %d %s", port, res.StatusCode, b)
		}
		return string(b)
	}
	if got := preview(f.agentPort(t, d, id), "/api/info"); !strings.Contains(got, `"sandboxId":"`+id+`"`) {
		t.Fatalf("the agent's preview: %s", got)
	}
	if got, want := preview(f.extraPort, "/x?y=1"), fmt.Sprintf("stub-agent: port %d of sandbox %s: /x?y=1", f.extraPort, id); got != want {
		t.Fatalf("the second port's preview: %q, want %q", got, want)
	}

	// Files survive a stop and a start.
	kept := filepath.Join(d.Root, id, supervisor.WorkspaceDir, "kept.txt")
	if err := os.WriteFile(kept, []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := dc.StopSandboxWithResponse(ctx, id, nil)
	must("stop", st.StatusCode(), st.Body, err, 200)
	if *st.JSON200.State != daytonaclient.SandboxStateStopped {
		t.Fatalf("stop answer: %s", st.Body)
	}
	// Archived: stopped, its files kept; a start brings it back.
	ar, err := dc.ArchiveSandboxWithResponse(ctx, id, nil)
	must("archive", ar.StatusCode(), ar.Body, err, 200)
	if !strings.Contains(string(ar.Body), `"state":"archived"`) {
		t.Fatalf("archive answer: %s", ar.Body)
	}
	sr, err := dc.StartSandboxWithResponse(ctx, id, nil)
	must("start", sr.StatusCode(), sr.Body, err, 200)
	testenv.Eventually(t, "started again", func() bool {
		g, err := dc.GetSandboxWithResponse(ctx, id, nil)
		must("get", g.StatusCode(), g.Body, err, 200)
		return *g.JSON200.State == daytonaclient.SandboxStateStarted
	})
	if b, err := os.ReadFile(kept); err != nil || string(b) != "still here" {
		t.Fatalf("the workspace after stop and start: %q %v", b, err)
	}
	if got := preview(f.extraPort, "/"); !strings.Contains(got, "sandbox "+id) {
		t.Fatalf("preview after the start: %s", got)
	}
	dl, err := dc.DeleteSandboxWithResponse(ctx, id, nil)
	must("delete", dl.StatusCode(), dl.Body, err, 200)
	gone, err := dc.GetSandboxWithResponse(ctx, id, nil)
	must("get after delete", gone.StatusCode(), gone.Body, err, 404)

	// A network policy is refused where the sandbox shares a network.
	yes := true
	nb, err := dc.CreateSandboxWithResponse(ctx, nil, daytonaclient.CreateSandbox{NetworkBlockAll: &yes, Snapshot: body.Snapshot})
	if f.snapshot == "" && daemonIsolates(t, d) { // an isolated one takes it
		must("networkBlockAll, isolated", nb.StatusCode(), nb.Body, err, 200)
		dl, err := dc.DeleteSandboxWithResponse(ctx, nb.JSON200.Id, nil)
		must("delete the isolated one", dl.StatusCode(), dl.Body, err, 200)
		nb, err = dc.CreateSandboxWithResponse(ctx, nil, daytonaclient.CreateSandbox{NetworkAllowList: new("example.com")})
		must("an allow list of no network", nb.StatusCode(), nb.Body, err, 400)
	} else if must("networkBlockAll", nb.StatusCode(), nb.Body, err, 400); !strings.Contains(string(nb.Body), "networkBlockAll") {
		t.Fatalf("networkBlockAll refusal: %s", nb.Body)
	}
	t.Logf("%d exchanges checked against Daytona's document (%d polls until started)", chk.n, polls)
	for _, want := range []string{"createSandbox 200", "getSandbox 200", "listSandboxes 200", "replaceLabels 200", "setAutostopInterval 200",
		"setAutoArchiveInterval 200", "setAutoDeleteInterval 200", "updateLastActivity 201", "getPortPreviewUrl 200", "getToolboxProxyUrl 200",
		"stopSandbox 200", "archiveSandbox 200", "startSandbox 200", "deleteSandbox 200", "getSandbox 404", "createSandbox 400"} {
		if !chk.seen[want] {
			t.Errorf("never exchanged: %s", want)
		}
	}
}

func TestDaytonaSDKFlowNative(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi})
	runDaytonaFlow(t, d, daytonaFlow{
		agentPort: func(t *testing.T, d *testenv.Daemon, id string) int {
			// A process listens on its leased port, the one /v1 shows.
			_, b := call(t, d, "GET", "/v1/sandboxes/"+id, "")
			var info struct{ Port int }
			json.Unmarshal(b, &info)
			return info.Port
		},
		extraPort: testenv.FreePort(t),
	})
}

func TestDaytonaSDKFlowDocker(t *testing.T) {
	c := engine(t)
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: `
[snapshots.stub]
runtime = "docker"
image = "` + stubImage + `"
command = ["/agent-control-plane", "stub-agent"]
`})
	t.Cleanup(func() { c.NetworkRemove(context.Background(), conf.InstanceName(d.Root)) })
	runDaytonaFlow(t, d, daytonaFlow{
		snapshot:  "stub",
		agentPort: func(*testing.T, *testenv.Daemon, string) int { return 4000 }, // PORT inside the container
		extraPort: 3000,
	})
}

// A sandbox whose agent exits before it is ready reads error (with its
// reason, recoverable) on /api, so that the SDK's wait for started ends
// there instead of at its own timeout.
func TestDaytonaStartupExitIsError(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi})
	ctx := testenv.Context(t)
	dc, chk := daytonaClient(t, d)
	env := map[string]string{"STUB_AGENT_EXIT_AFTER_MS": "200", "STUB_AGENT_READY_DELAY_MS": "600000"}
	cr, err := dc.CreateSandboxWithResponse(ctx, nil, daytonaclient.CreateSandbox{Env: &env})
	if err != nil || cr.StatusCode() != 200 {
		t.Fatalf("create: %v %s", err, cr.Body)
	}
	start := time.Now()
	var last *daytonaclient.Sandbox
	testenv.Eventually(t, "error", func() bool {
		g, err := dc.GetSandboxWithResponse(ctx, cr.JSON200.Id, nil)
		if err != nil || g.StatusCode() != 200 {
			t.Fatalf("get: %v %s", err, g.Body)
		}
		last = g.JSON200
		switch *last.State {
		case daytonaclient.SandboxStateStarting:
			time.Sleep(100 * time.Millisecond)
			return false
		case daytonaclient.SandboxStateError:
			return true
		}
		t.Fatalf("state %s before error", *last.State)
		return false
	})
	if last.ErrorReason == nil || !strings.HasPrefix(*last.ErrorReason, "exited_during_startup") || last.Recoverable == nil || !*last.Recoverable {
		t.Fatalf("error answer: %+v", last)
	}
	t.Logf("error seen %v after the create (the agent exits 200 ms in)", time.Since(start).Round(time.Millisecond))
	if !chk.seen["getSandbox 200"] {
		t.Error("no get was checked")
	}
}

// The check can fail: an answer without a field Daytona requires, a
// status Daytona does not answer with, a request its document refuses and
// an error in the daemon's /v1 shape are each caught.
func TestDaytonaCheckerCanFail(t *testing.T) {
	chk := newDaytonaChecker(t)
	req := func(method, path, body string) (*http.Request, []byte) {
		r, _ := http.NewRequest(method, "http://127.0.0.1:1/api"+path, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		r.Header.Set("Authorization", "Bearer x")
		return r, []byte(body)
	}
	answer := func(status int, body string) (*http.Response, []byte) {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		return &http.Response{StatusCode: status, Header: h}, []byte(body)
	}
	good := `{"id":"a","organizationId":"o","name":"a","target":"local","user":"u","public":false,"cpu":1,"gpu":0,"memory":1,"disk":1,
		"labels":{},"env":{},"networkBlockAll":false,"toolboxProxyUrl":"http://127.0.0.1:1/api/toolbox","state":"started"}`
	for _, c := range []struct {
		what             string
		method, path, in string
		status           int
		out              string
		ok               bool
	}{
		{"a whole sandbox", "GET", "/sandbox/a", "", 200, good, true},
		{"no toolboxProxyUrl", "GET", "/sandbox/a", "", 200, strings.Replace(good, `"toolboxProxyUrl":"http://127.0.0.1:1/api/toolbox",`, "", 1), false},
		{"a state Daytona lacks", "GET", "/sandbox/a", "", 200, strings.Replace(good, `"started"`, `"running"`, 1), false},
		{"201 for a create", "POST", "/sandbox", `{}`, 201, good, false},
		{"cpu as a string", "POST", "/sandbox", `{"cpu":"2"}`, 200, good, false},
		{"Daytona's error", "GET", "/sandbox/a", "", 404, `{"statusCode":404,"error":"Not Found","message":"no","path":"/api/sandbox/a","timestamp":"2026-01-01T00:00:00.000Z"}`, true},
		{"the /v1 error shape", "GET", "/sandbox/a", "", 404, `{"error":{"code":"not_found","message":"no"}}`, false},
		{"a route Daytona lacks", "GET", "/sandboxes", "", 200, `{}`, false},
	} {
		r, in := req(c.method, c.path, c.in)
		res, out := answer(c.status, c.out)
		if err := chk.check(r, in, res, []byte(out)); (err == nil) != c.ok {
			t.Errorf("%s: check said %v", c.what, err)
		}
	}
}

// The snapshot list and one snapshot answer as Daytona's document says
// (each exchange validated against it, answers included).
func TestDaytonaSnapshotsMatchTheDocument(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi})
	chk := newDaytonaChecker(t)
	c := &http.Client{Transport: chk, Timeout: time.Minute}
	for _, path := range []string{"/api/snapshots", "/api/snapshots?page=1&limit=10&sort=name&order=asc", "/api/snapshots/default"} {
		req, _ := http.NewRequest("GET", d.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+d.Token)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), `"name":"default"`) {
			t.Errorf("GET %s: %d %s", path, res.StatusCode, b)
		}
	}
	if !chk.seen["getAllSnapshots 200"] || !chk.seen["getSnapshot 200"] {
		t.Errorf("the checker saw %v", chk.seen)
	}
}
