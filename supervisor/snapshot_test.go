package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/logcap"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// A snapshot picks the command (expanded as systemd would), its env
// (under the request's), ready path and stop grace; the record keeps them,
// so a restart with another configuration probes and stops the sandbox as
// it was made.
func TestSnapshots(t *testing.T) {
	grace := 300 * time.Millisecond
	stub := testenv.StubArgv(t)
	snapshots := []snapshot.Snapshot{
		{Name: "default", ReadyPath: "/api/info"},
		{
			Name: "sh",
			Command: []string{"sh", "-c", `echo "args: $1 $2 $3; env: $GREETING $ONLY_SNAP"; exec "$0" stub-agent`,
				stub[0], "${PORT}", "${AGENT_SANDBOX_ID}", "$$literal"},
			Env:       map[string]string{"GREETING": "from-snapshot", "ONLY_SNAP": "1"},
			ReadyPath: "/api/info?ready=1", StopGrace: &grace, StartupTimeout: 20 * time.Second,
		},
	}
	h := realHarness(t, func(o *Options) { o.Snapshots = snapshots })
	ctx := context.Background()

	sb, err := h.sup.Create(ctx, CreateRequest{Name: "s1", Snapshot: "sh", Env: map[string]string{"GREETING": "from-request"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Snapshot != "sh" || sb.Runtime != "native" {
		t.Errorf("created from %q on %q", sb.Snapshot, sb.Runtime)
	}
	h.waitState("s1", Started)
	want := "args: " + strconv.Itoa(sb.Port) + " s1 $literal; env: from-request 1"
	testenv.Eventually(t, "the expanded command's first line in the log", func() bool {
		b, _ := os.ReadFile(filepath.Join(h.opts.Root, "s1", logcap.Stdout))
		return strings.Contains(string(b), want)
	})
	plain := h.create("p1", nil, nil)
	if plain.Snapshot != "default" {
		t.Errorf("a create naming no snapshot ran %q, want default", plain.Snapshot)
	}

	// An unknown snapshot names the known ones and leaves nothing.
	_, err = h.sup.Create(ctx, CreateRequest{Name: "u1", Snapshot: "nope"})
	if !isErr(err, ErrUnknownSnapshot) || !strings.Contains(err.Error(), "default, sh") {
		t.Errorf("unknown snapshot: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(h.opts.Root, "u1")); !os.IsNotExist(serr) {
		t.Errorf("a refused create left its directory: %v", serr)
	}
	if _, err := h.sup.Create(ctx, CreateRequest{Name: "u2", Snapshot: "sh", Runtime: "docker"}); !isErr(err, ErrInvalid) {
		t.Errorf("snapshot sh on another runtime: %v", err)
	}

	// The record carries what the snapshot said.
	r, err := h.sup.readRecord("s1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Snapshot != "sh" || r.ReadyPath != "/api/info?ready=1" || r.StopGraceMs != 300 || r.StartupTimeoutMs != 20000 {
		t.Errorf("record: snapshot %q readyPath %q grace %d startup %d", r.Snapshot, r.ReadyPath, r.StopGraceMs, r.StartupTimeoutMs)
	}

	// Restarted with a configuration that no longer has sh, and whose
	// default grace is long: s1 is adopted and stopped as it was made.
	h.close(false)
	h.opts.Snapshots = snapshots[:1]
	h.opts.StopGrace = time.Hour
	h.start()
	if sb, err := h.sup.Get("s1"); err != nil || sb.State != Started || sb.Snapshot != "sh" {
		t.Fatalf("after restart: %+v %v", sb, err)
	}
	h.sup.mu.Lock()
	e := h.sup.sandboxes["s1"]
	gotGrace, gotPath := e.grace, e.readyPath
	h.sup.mu.Unlock()
	if gotGrace != grace || gotPath != "/api/info?ready=1" {
		t.Errorf("adopted with grace %v and ready path %q, want the record's", gotGrace, gotPath)
	}
	if _, err := h.sup.Stop(ctx, "s1", false); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotsChecked(t *testing.T) {
	for _, tc := range []struct {
		snap snapshot.Snapshot
		want string
	}{
		{snapshot.Snapshot{Name: "../x", Command: []string{"a"}}, "must match"},
		{snapshot.Snapshot{Name: "x", Runtime: "vm", Command: []string{"a"}}, `runtime "vm"`},
		{snapshot.Snapshot{Name: "x"}, "needs a command"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a"}, Image: "img"}, "runs no images"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a", ""}}, "empty argument"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a"}, ReadyPath: "health"}, "must start with /"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a"}, Env: map[string]string{runtime.MarkerEnv: "m"}}, "not a variable it may set"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a"}, Env: map[string]string{runtime.EnvPort: "1"}}, "not a variable it may set"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a\x00b"}}, "NUL byte"},
		{snapshot.Snapshot{Name: "x", Command: []string{"a"}, Env: map[string]string{"K": "s3cret\x00"}}, "env K has a NUL byte"},
	} {
		opts := Options{Snapshots: []snapshot.Snapshot{tc.snap}, Runtimes: registry(&fake.Runtime{M: fake.NewMachine()}), ReadyPath: "/", StartupTimeout: time.Second}
		if _, err := checkSnapshots(&opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.snap, err, tc.want)
		}
	}
}

// A create that names no snapshot and no runtime runs the snapshot named
// default, whatever runtime it runs on (one for another runtime, named,
// runs that runtime's own default); a name that is no snapshot is an
// image for a runtime that runs images.
func TestDefaultSnapshotAndImagesWhateverTheRuntime(t *testing.T) {
	h := newHarness(t, func(o *Options) {})
	images := &fake.Runtime{M: h.machine, LocalPort: true, Images: true}
	h.close(true)
	reg := registry(&fake.Runtime{M: h.machine, LocalPort: true})
	if err := reg.Register("boxes", images); err != nil {
		t.Fatal(err)
	}
	h.opts.Runtimes = reg
	grace := time.Second
	h.opts.Snapshots = []snapshot.Snapshot{{Name: snapshot.Default, Runtime: "boxes", Image: "my-agent:dev", StopGrace: &grace, StartupTimeout: 30 * time.Second}}
	h.start()
	ctx := t.Context()
	for _, c := range []struct {
		req           CreateRequest
		runtime, snap string
	}{
		{CreateRequest{Name: "d1"}, "boxes", snapshot.Default},
		{CreateRequest{Name: "d2", Runtime: "native"}, "native", ""},
		{CreateRequest{Name: "d3", Snapshot: "busybox:stable"}, "boxes", "busybox:stable"},
	} {
		sb, err := h.sup.Create(ctx, c.req)
		if err != nil || sb.Runtime != c.runtime || sb.Snapshot != c.snap {
			t.Errorf("%+v: %s %q %v, want %s %q", c.req, sb.Runtime, sb.Snapshot, err, c.runtime, c.snap)
		}
	}
	if _, err := h.sup.Create(ctx, CreateRequest{Name: "d4", Snapshot: "busybox:stable", Runtime: "native"}); !isErr(err, ErrUnknownSnapshot) {
		t.Errorf("an image on a runtime that runs none: %v", err)
	}
	if _, err := h.sup.Create(ctx, CreateRequest{Name: "d5", Snapshot: "typo"}); !isErr(err, ErrUnknownSnapshot) || !strings.Contains(err.Error(), snapshot.Default) {
		t.Errorf("a bare word that is no snapshot: %v", err)
	}
}
