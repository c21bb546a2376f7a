package daytona

import (
	"crypto/sha256"
	"fmt"
	"math"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// SandboxListItem is Daytona's SandboxListItem: a sandbox as lists show it.
type SandboxListItem struct {
	ID                  string             `json:"id"`
	OrganizationID      string             `json:"organizationId"`
	Name                string             `json:"name"`
	Target              string             `json:"target"`
	State               string             `json:"state"`
	DesiredState        string             `json:"desiredState"`
	Snapshot            string             `json:"snapshot,omitempty"`
	User                string             `json:"user"`
	ErrorReason         string             `json:"errorReason,omitempty"`
	Recoverable         *bool              `json:"recoverable,omitempty"`
	Public              bool               `json:"public"`
	CPU                 float64            `json:"cpu"`
	GPU                 float64            `json:"gpu"`
	Memory              float64            `json:"memory"`
	Disk                float64            `json:"disk"`
	Labels              map[string]string  `json:"labels"`
	BackupState         string             `json:"backupState"`
	AutoStopInterval    float64            `json:"autoStopInterval"`
	AutoArchiveInterval float64            `json:"autoArchiveInterval"`
	AutoDeleteInterval  float64            `json:"autoDeleteInterval"`
	CreatedAt           string             `json:"createdAt"`
	UpdatedAt           string             `json:"updatedAt"`
	LastActivityAt      string             `json:"lastActivityAt"`
	DaemonVersion       string             `json:"daemonVersion,omitempty"`
	ToolboxProxyURL     string             `json:"toolboxProxyUrl"`
	Volumes             []wire.VolumeMount `json:"volumes,omitempty"`
	// Isolation is this daemon's: "namespaces" when the sandbox runs in
	// namespaces of its own, "off" when it shares the host's.
	Isolation string `json:"isolation"`
}

// Sandbox is Daytona's Sandbox: a sandbox with its variables (secret
// values redacted) and its network policy.
type Sandbox struct {
	SandboxListItem
	Env             map[string]string `json:"env"`
	NetworkBlockAll bool              `json:"networkBlockAll"`
	// NetworkAllowList is Daytona's: comma-separated CIDRs.
	NetworkAllowList string `json:"networkAllowList,omitempty"`
}

// ListSandboxesResponse is Daytona's page of a list.
type ListSandboxesResponse struct {
	Items      []SandboxListItem `json:"items"`
	NextCursor *string           `json:"nextCursor"`
}

// PortPreviewURL is Daytona's PortPreviewUrl.
type PortPreviewURL struct {
	SandboxID string `json:"sandboxId"`
	URL       string `json:"url"`
	Token     string `json:"token"`
}

// ToolboxProxyURL is Daytona's ToolboxProxyUrl.
type ToolboxProxyURL struct {
	URL string `json:"url"`
}

// SandboxLabels is Daytona's SandboxLabels.
type SandboxLabels struct {
	Labels map[string]string `json:"labels"`
}

// Daytona's states and desired states, as this daemon uses them.
const (
	StateStarting   = "starting"
	StateStarted    = "started"
	StateStopping   = "stopping"
	StateStopped    = "stopped"
	StateDestroying = "destroying"
	StateError      = "error"
	StateDestroyed  = "destroyed"
	StateArchived   = "archived"
)

// States is Daytona's SandboxState enum: what a list may filter on. The
// daemon's sandboxes are only ever in the few above.
var States = []string{"creating", "restoring", "destroyed", "destroying", "started", "stopped", "starting", "stopping",
	"error", "build_failed", "pending_build", "building_snapshot", "unknown", "pulling_snapshot", "archived",
	"archiving", "resizing", "snapshotting", "forking", "pausing", "paused", "resuming"}

// stateOf maps the daemon's state onto Daytona's. A sandbox that never
// became ready (it exited during startup, or its startup timed out) is
// Daytona's error, recoverable by a start; /v1 calls it stopped. One
// archived (this face's extension) and stopped since is archived.
func stateOf(sb supervisor.Sandbox) (state, desired string) {
	switch sb.Teardown {
	case supervisor.TeardownStop:
		return StateStopping, StateStopped
	case supervisor.TeardownDelete:
		return StateDestroying, StateDestroyed
	}
	switch sb.State {
	case supervisor.Starting:
		return StateStarting, StateStarted
	case supervisor.Started:
		return StateStarted, StateStarted
	case supervisor.Destroyed:
		return StateDestroyed, StateDestroyed
	}
	if extensionOf(sb).archived(sb) {
		return StateArchived, StateArchived
	}
	if sb.StopReason == supervisor.StopStartupFailed {
		return StateError, StateStarted
	}
	return StateStopped, StateStopped
}

// Machine is what this machine has, the values of limits a sandbox
// runs without.
type Machine struct {
	CPU, MemoryGiB, DiskGiB float64
}

// timeText is Daytona's timestamp: ISO 8601 in UTC with milliseconds, as
// JavaScript's toISOString writes it.
func timeText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func minutes(d time.Duration) float64 { return math.Round(d.Minutes()*1e6) / 1e6 }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// OrganizationID is the one organization of a daemon: a UUID derived from
// its root, the same across restarts.
func OrganizationID(root string) string {
	h := sha256.Sum256([]byte("agent-control-plane organization\x00" + root))
	h[6] = h[6]&0x0f | 0x50 // a name-based UUID (version 5 layout)
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// item converts a sandbox; toolbox is the toolbox base URL.
func (a *API) item(sb supervisor.Sandbox, toolbox string) SandboxListItem {
	state, desired := stateOf(sb)
	it := SandboxListItem{
		ID: sb.ID, OrganizationID: a.org, Name: sb.Name(), Target: Target, State: state, DesiredState: desired,
		Snapshot: sb.Snapshot, User: a.opts.User, ErrorReason: sb.ErrorReason, Public: sb.Public,
		CPU: a.opts.Machine.CPU, Memory: a.opts.Machine.MemoryGiB, Disk: a.opts.Machine.DiskGiB,
		Labels: sb.Labels, BackupState: "None",
		AutoStopInterval: minutes(sb.AutoStopInterval), AutoArchiveInterval: minutes(extensionOf(sb).autoArchive()),
		AutoDeleteInterval: -1,
		CreatedAt:          timeText(sb.CreatedAt), UpdatedAt: timeText(sb.UpdatedAt), LastActivityAt: timeText(sb.LastActivityAt),
		DaemonVersion: a.opts.Version, ToolboxProxyURL: toolbox, Isolation: sb.Isolation,
	}
	if it.Isolation == "" {
		it.Isolation = runtime.IsolationOff
	}
	for _, v := range sb.Volumes {
		it.Volumes = append(it.Volumes, wire.VolumeMount(v))
	}
	if it.Labels == nil {
		it.Labels = map[string]string{}
	}
	if state == StateError {
		yes := true
		it.Recoverable = &yes
	}
	if sb.AutoDeleteInterval != nil {
		it.AutoDeleteInterval = minutes(*sb.AutoDeleteInterval)
	}
	if sb.Resources.MilliCPU > 0 {
		it.CPU = limits.CPUs(sb.Resources.MilliCPU)
	}
	if sb.Resources.MemoryBytes > 0 {
		it.Memory = round2(limits.InGiB(sb.Resources.MemoryBytes))
	}
	return it
}

// Target is the one place sandboxes run here.
const Target = "local"

// toLimits converts Daytona's limits (CPUs and GiB) to the core's units.
func toLimits(cpus, gib *float64) (supervisor.Limits, error) {
	cpu, mem, err := limits.FromUnits(cpus, gib)
	return supervisor.Limits{MilliCPU: cpu, MemoryBytes: mem}, err
}
