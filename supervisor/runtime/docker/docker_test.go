package docker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/docker/dockertest"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/runtimetest"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

func TestRewriteLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"ws://localhost:1234/doc":          "ws://host.docker.internal:1234/doc",
		"http://127.0.0.1:4318":            "http://host.docker.internal:4318",
		"http://[::1]:9/otlp/traces":       "http://host.docker.internal:9/otlp/traces",
		"postgres://u:p@localhost/db?x=1":  "postgres://u:p@host.docker.internal/db?x=1",
		"http://localhost":                 "http://host.docker.internal",
		"http://localhost.example.com:80/": "http://localhost.example.com:80/",
		"https://api.example.com":          "https://api.example.com",
		"not a url":                        "not a url",
		"localhost:4025":                   "localhost:4025",
	} {
		if got := RewriteLoopback(in); got != want {
			t.Errorf("RewriteLoopback(%q) = %q, want %q", in, got, want)
		}
	}
}

// The docker runtime passes the conformance suite against the local
// engine.
func TestConformance(t *testing.T) {
	c := dockertest.Engine(t)
	owner := fmt.Sprintf("acp-rt-test-%d-%x", os.Getpid(), rand.Uint32())
	t.Cleanup(func() {
		ctx := context.Background()
		list, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+owner))})
		for _, ct := range list {
			_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true})
		}
		_ = c.NetworkRemove(ctx, owner) // the engine has few address pools
	})
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Runtime {
			r := &Runtime{Client: c, Host: c.DaemonHost(), Image: dockertest.StubImage, Port: 4000, Owner: owner,
				LogMaxBytes: 1 << 20, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			t.Cleanup(r.Close)
			return r
		},
		Workload: func(spec *runtime.Spec, knobs map[string]string) {
			spec.Vars = nil // a container gets no host base
			for k, v := range knobs {
				spec.Vars = append(spec.Vars, k+"="+v)
			}
		},
		Tool:  dockertest.ToolArgv,
		Forge: runtimetest.ForgeField("marker", "someone.else"),
	})
}
