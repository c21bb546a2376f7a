package wire

import (
	"encoding/json"
	"errors"
	"strings"
)

// DaytonaFields are the create fields of Daytona's API that ask for what
// a local sandbox may not be given. Both APIs take them and Check refuses
// any that asks for more than a local sandbox is, naming it and saying
// why: never a silent success (a caller asking for no network must not
// get the whole network). The network policy (networkBlockAll,
// networkAllowList) goes to the supervisor, whose runtime refuses it
// where the sandbox is not isolated. target is accepted as it is (there is one place
// here); autoArchiveInterval is kept apart (see daytona.WithAutoArchive).
type DaytonaFields struct {
	Target           string          `json:"target,omitempty"`
	User             string          `json:"user,omitempty"`
	Class            string          `json:"class,omitempty"`
	GPU              *float64        `json:"gpu,omitempty"`
	GPUType          []string        `json:"gpuType,omitempty"`
	Disk             *float64        `json:"disk,omitempty"`
	Volumes          []VolumeMount   `json:"volumes,omitempty"`
	NetworkBlockAll  bool            `json:"networkBlockAll,omitempty"`
	NetworkAllowList string          `json:"networkAllowList,omitempty"`
	DomainAllowList  string          `json:"domainAllowList,omitempty"`
	BuildInfo        json.RawMessage `json:"buildInfo,omitempty"`
	LinkedSandbox    string          `json:"linkedSandbox,omitempty"`
}

// VolumeMount is Daytona's SandboxVolume: a volume (made through
// /api/volumes) mounted at MountPath, or its Subpath only.
type VolumeMount struct {
	VolumeID  string `json:"volumeId"`
	MountPath string `json:"mountPath"`
	Subpath   string `json:"subpath,omitempty"`
}

// AllowList is networkAllowList's networks: Daytona's comma-separated
// CIDRs, each trimmed; the supervisor checks them.
func (f DaytonaFields) AllowList() []string {
	var out []string
	for _, c := range strings.Split(f.NetworkAllowList, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Check refuses every field that asks for something this daemon cannot
// give, all at once.
func (f DaytonaFields) Check() error {
	var why []string
	if f.User != "" {
		why = append(why, "user: a sandbox runs as the daemon's user (a container as its image's); no other user can be asked for")
	}
	if f.Class != "" {
		why = append(why, "class: there are no sandbox classes here; give cpu and memory instead")
	}
	if f.GPU != nil && *f.GPU != 0 || len(f.GPUType) > 0 {
		why = append(why, "gpu: sandboxes get no GPU here")
	}
	if f.Disk != nil && *f.Disk != 0 {
		why = append(why, "disk: a sandbox's disk is not bounded here (its workspace is a directory of this machine)")
	}
	if f.DomainAllowList != "" {
		why = append(why, "domainAllowList: this daemon filters a sandbox's traffic by network (networkAllowList), not by domain")
	}
	if len(f.BuildInfo) > 0 && string(f.BuildInfo) != "null" {
		why = append(why, "buildInfo: sandboxes run configured snapshots or local images; nothing is built on create")
	}
	if f.LinkedSandbox != "" {
		why = append(why, "linkedSandbox: there is one machine here; sandboxes are not linked")
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("not supported by this daemon: " + strings.Join(why, "; "))
}
