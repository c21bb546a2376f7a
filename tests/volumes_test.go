package tests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/conf"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// A volume, made as Daytona's SDK makes one, is seen by two docker
// sandboxes at once (one of them through a subpath), survives a stop and
// start in place, cannot be deleted while mounted, and goes with its
// files once nothing mounts it.
func TestVolumeSharedByTwoSandboxes(t *testing.T) {
	c := dockertest.ShellEngine(t)
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Config: `
[snapshots.shell]
runtime = "docker"
image = "` + dockertest.ShellImage + `"
command = ["/agent-control-plane", "stub-agent"]
`})
	t.Cleanup(func() { c.NetworkRemove(context.Background(), conf.InstanceName(d.Root)) })
	runVolumes(t, d, "shell")
}

// The same with isolated native sandboxes, which mount volumes too; a
// native sandbox without isolation refuses them, naming why.
func TestVolumeSharedByTwoIsolatedSandboxes(t *testing.T) {
	d := isolatedDaemon(t)
	runVolumes(t, d, "default")
	plain := startDaemon(t, "AGENT_CONTROL_PLANE_ISOLATION=off")
	code, b := call(t, plain, "POST", "/api/volumes", `{"name":"refused"}`)
	var v struct{ ID string }
	if json.Unmarshal(b, &v); code != 200 {
		t.Fatalf("create a volume: %d %s", code, b)
	}
	code, b = call(t, plain, "POST", "/api/sandbox", `{"name":"novol","volumes":[{"volumeId":"`+v.ID+`","mountPath":"/data"}]}`)
	if code != 400 || !strings.Contains(string(b), "volumes") {
		t.Fatalf("volumes on a native sandbox without isolation: %d %s", code, b)
	}
}

// runVolumes is the volume test on sandboxes of snapshot.
func runVolumes(t *testing.T, d *testenv.Daemon, snapshot string) {
	code, b := call(t, d, "POST", "/api/volumes", `{"name":"shared"}`)
	var v struct{ ID string }
	if json.Unmarshal(b, &v); code != 200 || v.ID == "" {
		t.Fatalf("create a volume: %d %s", code, b)
	}
	for _, sb := range []struct{ name, mount string }{
		{"va", `{"volumeId":"` + v.ID + `","mountPath":"/data"}`},
		{"vb", `{"volumeId":"` + v.ID + `","mountPath":"/mnt/sub","subpath":"inner"}`},
	} {
		t.Cleanup(func() { call(t, d, "DELETE", "/v1/sandboxes/"+sb.name, "") })
		if code, b := call(t, d, "POST", "/api/sandbox", `{"name":"`+sb.name+`","snapshot":"`+snapshot+`","volumes":[`+sb.mount+`]}`); code != 200 {
			t.Fatalf("create %s: %d %s", sb.name, code, b)
		}
		waitState(t, d, sb.name, "started")
	}
	va, vb := newToolboxClient(t, d, "va"), newToolboxClient(t, d, "vb")
	if code, out := va.execute(`{"command":"mkdir -p /data/inner && echo shared > /data/inner/f && echo top > /data/top"}`); code != 200 || out.ExitCode != 0 {
		t.Fatalf("write in va: %d %+v", code, out)
	}
	if code, out := vb.execute(`{"command":"cat /mnt/sub/f; ls /mnt/sub"}`); code != 200 || out.Result != "shared\nf\n" {
		t.Fatalf("vb sees the volume's subpath: %d %+v", code, out)
	}
	data := filepath.Join(d.Root, supervisor.VolumesDir, v.ID, "data")
	if b, err := os.ReadFile(filepath.Join(data, "top")); err != nil || string(b) != "top\n" {
		t.Fatalf("the volume on this machine: %q %v", b, err)
	}
	if code, b := call(t, d, "DELETE", "/api/volumes/"+v.ID, ""); code != 409 || !strings.Contains(string(b), "va") {
		t.Fatalf("delete a mounted volume: %d %s", code, b)
	}
	call(t, d, "POST", "/v1/sandboxes/va/stop", "")
	if code, b := call(t, d, "POST", "/v1/sandboxes/va/start", ""); code != 200 {
		t.Fatalf("start va again: %d %s", code, b)
	}
	waitState(t, d, "va", "started")
	if code, out := va.execute(`{"command":"cat /data/top"}`); code != 200 || out.Result != "top\n" {
		t.Fatalf("the volume after a start in place: %d %+v", code, out)
	}
	for _, name := range []string{"va", "vb"} {
		call(t, d, "DELETE", "/v1/sandboxes/"+name, "")
	}
	if code, b := call(t, d, "DELETE", "/api/volumes/"+v.ID, ""); code != 200 {
		t.Fatalf("delete the volume: %d %s", code, b)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the deleted volume's files: %v", err)
	}
}
