// Package dockertest builds images for tests and the bench: the stub
// agent in an image FROM scratch, through the engine, with no registry.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

// BuildImage builds the image tag from a Dockerfile and the files beside
// it, through the engine (no registry: FROM scratch needs none). A rebuild
// under the same tag removes the image it replaces. Tests and the bench
// use it to make an image of the stub agent.
func BuildImage(ctx context.Context, c *client.Client, tag, dockerfile string, files map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files["Dockerfile"] = []byte(dockerfile)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	old, _ := c.ImageInspect(ctx, tag)
	res, err := c.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
	if now, err := c.ImageInspect(ctx, tag); err == nil && old.ID != "" && now.ID != old.ID {
		_, _ = c.ImageRemove(ctx, old.ID, image.RemoveOptions{})
	}
	return nil
}

// StubDockerfile is contrib/docker/Dockerfile.stub, the one definition of
// the stub image (make docker-stub builds the same file): the project's
// binary, built static, FROM scratch.
func StubDockerfile() (string, error) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(), "contrib", "docker", "Dockerfile.stub"))
	return string(b), err
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// StubImage is the image tests run: the project's own binary, built
// static, FROM scratch (no registry is needed).
const StubImage = "agent-control-plane-stub:test"

var (
	imageOnce sync.Once
	imageErr  error
)

// Engine returns a client of the local Docker engine with StubImage
// built (once per test process), or skips saying why there is none.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Skipf("no docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Skipf("no docker engine reachable at %s: %v", c.DaemonHost(), err)
	}
	imageOnce.Do(func() { imageErr = buildStubImage(c) })
	if imageErr != nil {
		t.Fatalf("build the stub image: %v", imageErr)
	}
	return c
}

// buildStubImage builds StubImage: contrib's stub image (the product's
// binary, static) with the conformance suite's test tool added as
// /stub-exec (a scratch image has no shell to run its commands).
func buildStubImage(c *client.Client) error {
	dir, err := os.MkdirTemp("", "acp-stub-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := map[string][]byte{}
	for _, name := range []string{"agent-control-plane", "stub-exec"} {
		bin, err := testenv.BuildStatic(dir, name)
		if err != nil {
			return err
		}
		if files[name], err = os.ReadFile(bin); err != nil {
			return err
		}
	}
	df, err := StubDockerfile()
	if err != nil {
		return err
	}
	return BuildImage(context.Background(), c, StubImage, df+"COPY stub-exec /stub-exec\n", files)
}

// ToolArgv is the argv that runs the test tool in StubImage.
var ToolArgv = []string{"/stub-exec"}

// ShellImage is StubImage with a shell and the usual tools (a static
// busybox, from Debian's busybox-static on this machine: nothing is
// pulled), for the toolbox's commands and sessions.
const ShellImage = "agent-control-plane-stub-shell:test"

// Busybox is where the host's static busybox is looked for.
const Busybox = "/bin/busybox"

const shellDockerfile = `FROM ` + StubImage + `
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "mkdir", "-p", "/tmp", "/root"]
ENV PATH=/bin
`

var (
	shellOnce sync.Once
	shellErr  error
)

// ShellEngine is Engine with ShellImage built too, or skips saying why
// there is none.
func ShellEngine(t testing.TB) *client.Client {
	t.Helper()
	c := Engine(t)
	b, err := os.ReadFile(Busybox)
	if err != nil {
		t.Skipf("no static busybox for a shell image (Debian's busybox-static): %v", err)
	}
	shellOnce.Do(func() {
		shellErr = BuildImage(context.Background(), c, ShellImage, shellDockerfile, map[string][]byte{"busybox": b})
	})
	if shellErr != nil {
		t.Fatalf("build the shell image: %v", shellErr)
	}
	return c
}
