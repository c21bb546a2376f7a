package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
)

// benchShellImage is benchImage with a static busybox: a shell for
// Daytona's execute.
const benchShellImage = "agent-control-plane-stub-shell:bench"

// benchDockerExecute times Daytona's execute of `true` in a docker
// sandbox against its floor, run by run: the same shell command (the
// image's shell reading `true`) run through the engine's exec API from
// here, in the same container (create, attach, input, output to its end,
// inspect). It is skipped, saying why, without a static busybox.
func benchDockerExecute(c config, d *daemon, r *results, cli *client.Client) error {
	ctx := context.Background()
	bb, err := os.ReadFile(dockertest.Busybox)
	if err != nil {
		r.Docker.ExecuteSkipped = "no static busybox for a shell (Debian's busybox-static): " + err.Error()
		return nil
	}
	df := "FROM " + benchImage + "\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/bin\n"
	if err := dockertest.BuildImage(ctx, cli, benchShellImage, df, map[string][]byte{"busybox": bb}); err != nil {
		return fmt.Errorf("build %s: %w", benchShellImage, err)
	}
	sb, err := d.createWith(map[string]any{"name": "dexec", "runtime": "docker", "snapshot": benchShellImage})
	if err != nil {
		return err
	}
	defer d.delete("dexec")
	pollChild(prober, sb.Port)
	cid, err := containerOf(ctx, cli, "dexec")
	if err != nil {
		return err
	}
	var floor, execute []time.Duration
	for range c.runs {
		t0 := time.Now()
		if err := engineExec(ctx, cli, cid, supervisor.ShellArgv, "true\n"); err != nil {
			return err
		}
		floor = append(floor, time.Since(t0))
		t0 = time.Now()
		if err := post(d.url("/api/toolbox/dexec/process/execute"), "application/json", strings.NewReader(`{"command":"true"}`), 200); err != nil {
			return err
		}
		execute = append(execute, time.Since(t0))
	}
	r.Docker.ExecuteFloor, r.Docker.Execute = summarize(floor), summarize(execute)
	return nil
}

// containerOf is the id of the container of the daemon's sandbox id.
func containerOf(ctx context.Context, cli *client.Client, id string) (string, error) {
	list, err := cli.ContainerList(ctx, container.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, c := range list {
		if c.Labels[docker.LabelSandbox] == id {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("no container of %s", id)
}

// engineExec runs argv in container cid through the engine's exec API
// with input, to its end, as a client of the engine would.
func engineExec(ctx context.Context, cli *client.Client, cid string, argv []string, input string) error {
	x, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: argv, AttachStdin: true, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	att, err := cli.ContainerExecAttach(ctx, x.ID, container.ExecAttachOptions{})
	if err != nil {
		return err
	}
	defer att.Close()
	io.WriteString(att.Conn, input)
	att.CloseWrite()
	io.Copy(io.Discard, att.Reader)
	ins, err := cli.ContainerExecInspect(ctx, x.ID)
	if err != nil {
		return err
	}
	if ins.ExitCode != 0 {
		return fmt.Errorf("engine exec %v: exit %d", argv, ins.ExitCode)
	}
	return nil
}
