package main

import (
	"cmp"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
)

// benchImage is the stub image the docker step builds and runs.
const benchImage = "agent-control-plane-stub:bench"

// benchDocker times a docker create until the container's agent-server
// answers, beside a floor: the same image started directly through the
// engine API, on a network like the daemon's, and polled the same way.
// It is skipped, with the reason in the results, where no engine answers
// or no static binary was built.
func benchDocker(c config, d *daemon, r *results) error {
	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cli.Ping(pctx)
		cancel()
	}
	if err != nil {
		r.Docker.Skipped = "no docker engine: " + err.Error()
		return nil
	}
	path := cmp.Or(c.staticBin, c.bin)
	if why := notStatic(path); why != "" {
		r.Docker.Skipped = "no static binary for the image (make build makes one): " + why
		return nil
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	df, err := dockertest.StubDockerfile()
	if err != nil {
		return err
	}
	if err := dockertest.BuildImage(ctx, cli, benchImage, df, map[string][]byte{"agent-control-plane": bin}); err != nil {
		return fmt.Errorf("build %s: %w", benchImage, err)
	}
	workspace, err := os.MkdirTemp("", "acp-bench-workspace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(workspace)
	// The floor's containers are kept apart as the daemon's are, on a
	// network made as the daemon makes its own: on this engine a
	// container on such a network takes about 170 ms longer to start
	// than one on the default bridge.
	floorNet := "acp-bench-floor-" + strconv.Itoa(os.Getpid())
	if _, err := cli.NetworkCreate(ctx, floorNet, docker.NetworkOptions(floorNet)); err != nil {
		return fmt.Errorf("docker network %s: %w", floorNet, err)
	}
	defer cli.NetworkRemove(ctx, floorNet)
	var floor, created []time.Duration
	for i := range c.runs {
		port := d.portHi + 1 + i%50
		t0 := time.Now()
		id, err := runDirect(ctx, cli, port, workspace, floorNet)
		if err != nil {
			return err
		}
		floor = append(floor, pollChild(prober, port).Sub(t0))
		cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})

		name := fmt.Sprintf("docker%d", i)
		t0 = time.Now()
		sb, err := d.createWith(map[string]any{"name": name, "runtime": "docker", "snapshot": benchImage})
		if err != nil {
			return err
		}
		created = append(created, pollChild(prober, sb.Port).Sub(t0))
		d.delete(name)
	}
	r.Docker.Floor, r.Docker.ChildAnswers = summarize(floor), summarize(created)
	return benchDockerExecute(c, d, r, cli)
}

// runDirect starts the stub image as the docker runtime would, without
// the daemon: on network netName, published on 127.0.0.1:port, a
// workspace mounted, the host reachable as host.docker.internal.
func runDirect(ctx context.Context, cli *client.Client, port int, workspace, netName string) (string, error) {
	p := nat.Port("4000/tcp")
	res, err := cli.ContainerCreate(ctx, &container.Config{
		Image: benchImage, Env: []string{"PORT=4000", "HOST=0.0.0.0", "AGENT_SANDBOX_ID=floor"},
		ExposedPorts: nat.PortSet{p: struct{}{}},
	}, &container.HostConfig{
		PortBindings: nat.PortMap{p: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}},
		Binds:        []string{workspace + ":" + docker.WorkspaceDir},
		ExtraHosts:   []string{"host.docker.internal:host-gateway"},
		NetworkMode:  container.NetworkMode(netName),
	}, nil, nil, "")
	if err != nil {
		return "", err
	}
	if err := cli.ContainerStart(ctx, res.ID, container.StartOptions{}); err != nil {
		cli.ContainerRemove(ctx, res.ID, container.RemoveOptions{Force: true})
		return "", err
	}
	return res.ID, nil
}

// notStatic says why the ELF file at path cannot run in an image FROM
// scratch ("" when it can): it asks for a dynamic loader.
func notStatic(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return path + " is dynamically linked (built with cgo)"
		}
	}
	return ""
}
