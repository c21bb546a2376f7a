package api

import (
	"math"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/limits"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

func ptrTime(t time.Time) *wire.Time {
	if t.IsZero() {
		return nil
	}
	return &wire.Time{Time: t}
}

func minutes(d time.Duration) float64 {
	m := d.Minutes()
	// Keep whole-millisecond durations tidy on the wire (0.5, not 0.50000001).
	return math.Round(m*1e6) / 1e6
}

// previewURL is where the sandbox's workload serves, as its runtime
// reports it ("" when it reports nothing).
func previewURL(sb supervisor.Sandbox) string {
	if sb.Endpoint.IsZero() {
		return ""
	}
	return sb.Endpoint.URL("")
}

// isolationOf is sb's isolation as answers say it: a sandbox that has
// not run yet says its runtime's (none here: off).
func isolationOf(sb supervisor.Sandbox) string {
	if sb.Isolation == "" {
		return runtime.IsolationOff
	}
	return sb.Isolation
}

// ToInfo converts the supervisor's view of a sandbox to its wire shape.
func ToInfo(sb supervisor.Sandbox) wire.SandboxInfo {
	info := wire.SandboxInfo{
		ID: sb.ID, Name: sb.Name(), State: string(sb.State), Runtime: sb.Runtime,
		Port: sb.Port, PreviewURL: previewURL(sb), Labels: sb.Labels,
		Snapshot: sb.Snapshot, Public: sb.Public,
		CreatedAt: wire.Time{Time: sb.CreatedAt}, UpdatedAt: wire.Time{Time: sb.UpdatedAt}, LastActivityAt: wire.Time{Time: sb.LastActivityAt},
		StartedAt: ptrTime(sb.StartedAt), StoppedAt: ptrTime(sb.StoppedAt),
		AutoStopInterval: minutes(sb.AutoStopInterval), AutoStopAt: ptrTime(sb.AutoStopAt()),
		AutoDeleteInterval: -1, Workspace: sb.Workspace, Isolation: isolationOf(sb),
		NetworkBlockAll: sb.Network.BlockAll, NetworkAllowList: strings.Join(sb.Network.AllowList, ","),
	}
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	if v, ok := sb.Labels["harnessSessionId"]; ok {
		info.SessionID = &v
	}
	if sb.AutoDeleteInterval != nil {
		info.AutoDeleteInterval = minutes(*sb.AutoDeleteInterval)
	}
	if sb.ErrorReason != "" {
		r := sb.ErrorReason
		info.ErrorReason = &r
	}
	info.CPU, info.Memory, info.Pids = limits.CPUs(sb.Resources.MilliCPU), limits.InGiB(sb.Resources.MemoryBytes), sb.Resources.Pids
	if u := sb.Usage; u != nil {
		info.Usage = &wire.Usage{CPUSeconds: math.Round(u.CPUSeconds*1e6) / 1e6, MemoryBytes: u.MemoryBytes, Pids: u.Pids}
	}
	return info
}

// toLimits converts a request's resource fields (CPUs and GiB) to the
// core's units.
func toLimits(l wire.Limits) (supervisor.Limits, error) {
	cpu, mem, err := limits.FromUnits(l.CPU, l.Memory)
	return supervisor.Limits{MilliCPU: cpu, MemoryBytes: mem, Pids: l.Pids}, err
}

// ToStreamEvent converts a supervisor event to its wire shape.
func ToStreamEvent(ev supervisor.Event) wire.StreamEvent {
	out := wire.StreamEvent{Type: ev.Type, Seq: ev.Seq, Time: wire.Time{Time: ev.Time}}
	if ev.Type == supervisor.EventReplaced {
		out.Sandboxes = make([]wire.SandboxInfo, 0, len(ev.All))
		for _, sb := range ev.All {
			out.Sandboxes = append(out.Sandboxes, ToInfo(sb))
		}
		return out
	}
	info := ToInfo(ev.Sandbox)
	out.Sandbox = &info
	return out
}
