package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// handle is one container.
type handle struct {
	r  *Runtime
	st state // as persisted: the container, its marker, log files, port, workspace
	// Files: the workspace, bind-mounted at WorkspaceDir.
	workspace.Files
	// adopted: the limits in force when Adopt inspected the container.
	adopted *runtime.Resources

	*runtime.Ending // Done, Exit

	mu       sync.Mutex
	unfollow context.CancelFunc
	ip       string // the container's address on the daemon's network, once asked
	path     string // the container's PATH, once asked
	// found are the programs lookPath found, by their candidates: an
	// image's programs stay where they are, so each is looked for once.
	found    map[string]bool
	followed sync.WaitGroup
}

func (h *handle) finish(e runtime.Exit) {
	if h.End(e) {
		h.r.untrack(h.st.ID)
	}
}

func (h *handle) State() runtime.HandleState {
	b, _ := json.Marshal(h.st)
	return runtime.HandleState{Version: stateVersion, Data: b}
}

// Endpoint: the published port on the host's loopback.
func (h *handle) Endpoint() runtime.Endpoint {
	if h.st.Port == 0 {
		return runtime.Endpoint{}
	}
	return runtime.Loopback(h.st.Port)
}

// Stop asks the engine to stop the container: SIGTERM, grace, SIGKILL.
func (h *handle) Stop(ctx context.Context, grace time.Duration) error {
	secs := int(math.Ceil(grace.Seconds()))
	err := h.r.Client.ContainerStop(ctx, h.st.ID, container.StopOptions{Timeout: &secs})
	if err != nil && !client.IsErrNotFound(err) {
		return h.r.engineErr("stop container", err)
	}
	if client.IsErrNotFound(err) {
		h.finish(runtime.Exit{Unknown: true})
	}
	h.r.died(ctx, h.st.ID) // the die event may lag the answer
	select {
	case <-h.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delete removes the container and stops copying its output.
func (h *handle) Delete(ctx context.Context) error {
	h.mu.Lock()
	if h.unfollow != nil {
		h.unfollow()
	}
	h.mu.Unlock()
	h.followed.Wait()
	h.r.untrack(h.st.ID)
	err := h.r.Client.ContainerRemove(ctx, h.st.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !client.IsErrNotFound(err) {
		return h.r.engineErr("remove container", err)
	}
	return nil
}

// Resize applies new limits to the running container.
func (h *handle) Resize(ctx context.Context, res runtime.Resources) error {
	_, err := h.r.Client.ContainerUpdate(ctx, h.st.ID, container.UpdateConfig{Resources: resources(res)})
	if err != nil {
		return h.r.limitsErr("update container", err)
	}
	return nil
}

// Limits reads the limits in force from the engine.
func (h *handle) Limits(ctx context.Context) (runtime.Resources, error) {
	if h.adopted != nil { // read by Adopt's inspect: no second round trip
		return *h.adopted, nil
	}
	info, err := h.r.Client.ContainerInspect(ctx, h.st.ID)
	if err != nil {
		return runtime.Resources{}, h.r.engineErr("inspect container", err)
	}
	return limitsOf(info), nil
}

// limitsOf reads the limits in force from an inspect.
func limitsOf(info container.InspectResponse) runtime.Resources {
	var res runtime.Resources
	if hc := info.HostConfig; hc != nil {
		res.MilliCPU = (hc.NanoCPUs + 5e5) / 1e6 // to the nearest thousandth
		res.MemoryBytes = hc.Memory
		if hc.PidsLimit != nil && *hc.PidsLimit > 0 {
			res.Pids = *hc.PidsLimit
		}
	}
	return res
}

// Usage asks the engine for the container's consumption (one-shot stats:
// no second sample is awaited).
func (h *handle) Usage(ctx context.Context) (runtime.Usage, error) {
	rd, err := h.r.Client.ContainerStatsOneShot(ctx, h.st.ID)
	if err != nil {
		return runtime.Usage{}, h.r.engineErr("container stats", err)
	}
	defer rd.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(rd.Body, 1<<20)).Decode(&st); err != nil {
		return runtime.Usage{}, fmt.Errorf("container stats: %w", err)
	}
	return runtime.Usage{
		CPUSeconds:  float64(st.CPUStats.CPUUsage.TotalUsage) / 1e9,
		MemoryBytes: int64(st.MemoryStats.Usage),
		Pids:        int64(st.PidsStats.Current),
	}, nil
}

// Isolation: a container runs in namespaces of its own.
func (h *handle) Isolation() string { return runtime.IsolationNamespaces }

// PortEndpoint: the agent's port is the one published on the loopback;
// any other is reached at the container's address on the daemon's
// network (a bridge: the host routes to it), which the engine is asked
// for once.
func (h *handle) PortEndpoint(ctx context.Context, port int) (runtime.Endpoint, error) {
	if port == h.r.Port && h.st.Port != 0 {
		return h.Endpoint(), nil
	}
	h.mu.Lock()
	ip := h.ip
	h.mu.Unlock()
	if ip == "" {
		info, err := h.r.Client.ContainerInspect(ctx, h.st.ID)
		if err != nil {
			return runtime.Endpoint{}, h.r.engineErr("inspect container", err)
		}
		if info.NetworkSettings != nil {
			if n := info.NetworkSettings.Networks[h.r.network()]; n != nil {
				ip = n.IPAddress
			}
		}
		if ip == "" {
			return runtime.Endpoint{}, fmt.Errorf("container %s has no address on the network %s", h.st.ID[:min(12, len(h.st.ID))], h.r.network())
		}
		h.mu.Lock()
		h.ip = ip
		h.mu.Unlock()
	}
	return runtime.Endpoint{Host: ip, Port: port}, nil
}
