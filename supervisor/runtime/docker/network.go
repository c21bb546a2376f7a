package docker

import (
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// The daemon's own bridge network keeps sandboxes apart: inter-container
// traffic is off (the engine's enable_icc=false), so a sandbox reaches
// the host (host.docker.internal) and the internet, but no other
// sandbox, whatever it listens on. Its published port is reached from
// the host's loopback only, as before.
const iccOption = "com.docker.network.bridge.enable_icc"

// NetworkOptions are those of the daemon's network, owned by owner: a
// bridge with inter-container traffic off.
func NetworkOptions(owner string) network.CreateOptions {
	return network.CreateOptions{
		Driver:  "bridge",
		Options: map[string]string{iccOption: "false"},
		Labels:  map[string]string{LabelOwner: owner},
	}
}

// network is the name of the daemon's network: one per root.
func (r *Runtime) network() string { return r.Owner }

// ensureNetwork makes the daemon's network if it is not there, once per
// runtime. A network of that name that lets containers talk to each
// other is refused rather than used.
func (r *Runtime) ensureNetwork(ctx context.Context) error {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if r.netReady {
		return nil
	}
	name := r.network()
	info, err := r.Client.NetworkInspect(ctx, name, network.InspectOptions{})
	if client.IsErrNotFound(err) {
		_, err = r.Client.NetworkCreate(ctx, name, NetworkOptions(r.Owner))
		if err == nil || cerrdefs.IsConflict(err) {
			info, err = r.Client.NetworkInspect(ctx, name, network.InspectOptions{})
		}
	}
	if err != nil {
		return r.engineErr("docker network "+name, err)
	}
	if info.Driver != "bridge" || info.Options[iccOption] != "false" {
		return fmt.Errorf("%w: the docker network %s exists but is not one that keeps sandboxes apart (driver %s, %s=%q); remove it (docker network rm %s) and the daemon makes its own",
			runtime.ErrUnavailable, name, info.Driver, iccOption, info.Options[iccOption], name)
	}
	r.netReady = true
	return nil
}

// removeNetwork removes the daemon's network when no container is on it
// any more (the engine refuses otherwise, and sandboxes outlive the
// daemon by design: then it stays). The daemon made it: its name is the
// root's, and it carries the owner label.
func (r *Runtime) removeNetwork(ctx context.Context) {
	name := r.network()
	info, err := r.Client.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil || info.Labels[LabelOwner] != r.Owner || len(info.Containers) > 0 {
		return
	}
	if err := r.Client.NetworkRemove(ctx, name); err == nil {
		r.netMu.Lock()
		r.netReady = false // the next create makes it again
		r.netMu.Unlock()
		r.Log.Debug("removed the docker network: no sandbox is on it", "network", name)
	}
}

// networkGone reports whether err says the daemon's network does not
// exist, and if so forgets that it was made, so that the next
// ensureNetwork makes it again.
func (r *Runtime) networkGone(err error) bool {
	if err == nil || !client.IsErrNotFound(err) || !strings.Contains(err.Error(), "network "+r.network()) {
		return false
	}
	r.netMu.Lock()
	r.netReady = false
	r.netMu.Unlock()
	return true
}
