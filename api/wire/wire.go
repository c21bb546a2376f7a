// Package wire holds the JSON shapes of the agent-control-plane /v1 API,
// shared by the daemon and its clients. It depends on the standard library
// only, so a client pulls in nothing else.
package wire

import (
	"encoding/json"
	"fmt"
	"time"
)

// APIVersion is the version of the /v1 contract this daemon speaks. It
// changes when a response shape changes incompatibly.
const APIVersion = "1"

// Name is what /v1/info answers as the daemon's name; clients use it to
// tell agent-control-plane from whatever else holds the port.
const Name = "agent-control-plane"

// TimeFormat is the wire format of every timestamp: RFC 3339, UTC,
// milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// Time is a timestamp in TimeFormat.
type Time struct{ time.Time }

// MarshalJSON writes t in TimeFormat.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format(TimeFormat) + `"`), nil
}

// UnmarshalJSON reads any RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	t.Time = v
	return err
}

// SandboxInfo is the wire shape of a sandbox. It never carries env values.
type SandboxInfo struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	State            string            `json:"state"`
	Runtime          string            `json:"runtime"`
	SessionID        *string           `json:"sessionId"`
	Port             int               `json:"port"`
	PreviewURL       string            `json:"previewUrl"`
	Labels           map[string]string `json:"labels"`
	Snapshot         string            `json:"snapshot,omitempty"`
	Public           bool              `json:"public"`
	CreatedAt        Time              `json:"createdAt"`
	UpdatedAt        Time              `json:"updatedAt"`
	LastActivityAt   Time              `json:"lastActivityAt"`
	StartedAt        *Time             `json:"startedAt"`
	StoppedAt        *Time             `json:"stoppedAt"`
	AutoStopInterval float64           `json:"autoStopInterval"` // minutes; 0 disabled
	AutoStopAt       *Time             `json:"autoStopAt"`
	// AutoDeleteInterval in minutes: -1 never, 0 right after stop.
	AutoDeleteInterval float64 `json:"autoDeleteInterval"`
	ErrorReason        *string `json:"errorReason,omitempty"`
	// Isolation is "namespaces" when the sandbox's workload runs in
	// namespaces of its own (an isolated native sandbox, a container),
	// "off" when it shares the host's.
	Isolation string `json:"isolation"`
	// NetworkBlockAll and NetworkAllowList are its network policy
	// (Daytona's fields); absent: the outside network.
	NetworkBlockAll  bool   `json:"networkBlockAll,omitempty"`
	NetworkAllowList string `json:"networkAllowList,omitempty"`
	// Limits in force, in Daytona's units; absent: none.
	CPU    float64 `json:"cpu,omitempty"`    // CPUs
	Memory float64 `json:"memory,omitempty"` // GiB
	Pids   int64   `json:"pids,omitempty"`
	// Usage is what a live sandbox consumes now, where its runtime can
	// say (a native sandbox in a cgroup, a docker container).
	Usage *Usage `json:"usage,omitempty"`
	// Workspace is the sandbox's workspace directory on this machine
	// (reads only; events do not carry it).
	Workspace string `json:"workspace,omitempty"`
	// EnvKeys are the names of the variables the sandbox's workload was
	// given, never their values (a read of one sandbox only).
	EnvKeys []string `json:"envKeys,omitempty"`
	// Logs are its logs' sizes on disk, stdout then stderr (a read of
	// one sandbox only).
	Logs []LogSize `json:"logs,omitempty"`
}

// LogSize is how much of one stream's log is on disk, and was written.
type LogSize struct {
	Stream       string `json:"stream"`       // "stdout" or "stderr"
	LiveBytes    int64  `json:"liveBytes"`    // in the live file (stdout.log)
	RotatedBytes int64  `json:"rotatedBytes"` // in the rotated one (stdout.log.1); 0: none
	// WrittenBytes: every byte written to it, what rotation dropped
	// included.
	WrittenBytes int64 `json:"writtenBytes"`
}

// ExecRequest runs a command inside a sandbox (POST …/exec).
type ExecRequest struct {
	Argv  []string          `json:"argv"`
	Env   map[string]string `json:"env,omitempty"`
	Dir   string            `json:"dir,omitempty"`   // as the workload sees it; default its workspace
	Stdin string            `json:"stdin,omitempty"` // the command's whole input; absent: none
	// TimeoutMs kills the command this long after it started; absent or
	// 0: the daemon's default (10 minutes).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// TerminalRequest opens a terminal in a sandbox (POST …/terminals): a
// command on a pseudo-terminal, which starts when a client attaches
// (GET …/terminals/{terminal}/attach, a WebSocket).
type TerminalRequest struct {
	// Argv is the command; empty: the sandbox's shell ($SHELL, else sh).
	Argv []string          `json:"argv,omitempty"`
	Env  map[string]string `json:"env,omitempty"` // TERM defaults to xterm-256color
	Dir  string            `json:"dir,omitempty"` // as the workload sees it; default its workspace
	Cols int               `json:"cols,omitempty"`
	Rows int               `json:"rows,omitempty"` // both 0: 80 by 24
}

// Terminal is an open terminal.
type Terminal struct {
	ID        string    `json:"id"`
	Cols      int       `json:"cols"`
	Rows      int       `json:"rows"`
	Active    bool      `json:"active"` // its command runs or waits for its client
	CreatedAt time.Time `json:"createdAt"`
}

// TerminalResize is the text message that resizes a terminal on its
// WebSocket; every binary message is typed into it. The daemon sends a
// control message once attached ({"type":"control","status":"connected"}),
// the output as binary messages, and closes normally at the command's
// end with the reason {"exitCode":N} (Daytona's PTY protocol).
type TerminalResize struct {
	Type string `json:"type"` // "resize"
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// Events of a streamed exec (POST …/exec with Accept: text/event-stream):
// "stdout" and "stderr" events whose data is an ExecChunk, as the command
// writes, then one "exit" event whose data is an ExecResponse without
// output.
const (
	ExecEventStdout = "stdout"
	ExecEventStderr = "stderr"
	ExecEventExit   = "exit"
)

// ExecChunk is a piece of a streamed exec's output, redacted.
type ExecChunk struct {
	Text string `json:"text"`
}

// ExecResponse is how the command ended and what it wrote (the last MiB
// of each stream; OutputCut says when more was written).
type ExecResponse struct {
	ExitCode  int    `json:"exitCode"`
	Signal    int    `json:"signal,omitempty"`
	Reason    string `json:"reason,omitempty"` // "timeout" when killed past its time
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	OutputCut bool   `json:"outputCut,omitempty"`
}

// Session is a shell kept inside a sandbox: what one command changes of
// its state (its directory, its variables), the next one sees.
type Session struct {
	Name     string           `json:"name"`
	Commands []SessionCommand `json:"commands"`
}

// SessionCommand is one command run in a session.
type SessionCommand struct {
	ID       string `json:"id"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exitCode"` // null while it runs
}

// CreateSessionRequest names a new session.
type CreateSessionRequest struct {
	Name string `json:"name"`
}

// SessionExecRequest runs a command line in a session (with its shell).
type SessionExecRequest struct {
	Command string `json:"command"`
}

// SessionExecResponse is how a session's command ended and what it wrote.
type SessionExecResponse struct {
	ID        string `json:"id"`
	ExitCode  int    `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	OutputCut bool   `json:"outputCut,omitempty"`
}

// FileEntry describes one file of a sandbox.
type FileEntry struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"` // octal permission bits, "0644"
	Type    string `json:"type"` // file, dir, symlink, fifo, socket or device
	IsDir   bool   `json:"isDir"`
	ModTime Time   `json:"modTime"`
	Link    string `json:"link,omitempty"` // a symbolic link's target
}

// FileList lists a directory of a sandbox.
type FileList struct {
	Items []FileEntry `json:"items"`
}

// Usage is what a sandbox consumes: CPU time so far, memory and tasks now.
type Usage struct {
	CPUSeconds  float64 `json:"cpuSeconds"`
	MemoryBytes int64   `json:"memoryBytes"`
	Pids        int64   `json:"pids"`
}

// Limits are the resource fields of a create or resize, in Daytona's
// units: cpu in CPUs and memory in GiB (fractions allowed), pids a number
// of tasks. Absent keeps the current value (at create: the daemon's
// default); 0 means no limit.
type Limits struct {
	CPU    *float64 `json:"cpu,omitempty"`
	Memory *float64 `json:"memory,omitempty"`
	Pids   *int64   `json:"pids,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Name     string            `json:"name"`
	Runtime  string            `json:"runtime,omitempty"`
	Snapshot string            `json:"snapshot,omitempty"`
	EnvVars  map[string]string `json:"envVars,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Public   bool              `json:"public,omitempty"`
	// AutoStopInterval in minutes; absent takes the daemon default, 0
	// disables.
	AutoStopInterval *float64 `json:"autoStopInterval,omitempty"`
	// AutoDeleteInterval in minutes; absent or -1 never, 0 right after
	// stop.
	AutoDeleteInterval *float64 `json:"autoDeleteInterval,omitempty"`
	Limits
}

// Event types on /v1/events.
const (
	EventReplaced = "sandboxes_replaced"
	EventCreated  = "sandbox.created"
	EventStarting = "sandbox.starting"
	EventStarted  = "sandbox.started"
	EventStopped  = "sandbox.stopped"
	EventDeleted  = "sandbox.deleted"
)

// States of a sandbox.
const (
	StateStarting  = "starting"
	StateStarted   = "started"
	StateStopped   = "stopped"
	StateDestroyed = "destroyed"
)

// Live reports whether a sandbox in state runs (starting or started): it
// holds its port, and has a preview.
func Live(state string) bool { return state == StateStarting || state == StateStarted }

// Info is the body of GET /v1/info.
type Info struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	APIVersion string `json:"apiVersion"`
	PID        int    `json:"pid"`
	StartedAt  Time   `json:"startedAt"`
	Root       string `json:"root"`
	PortRange  string `json:"portRange"`
	// Runtimes lists the runtimes creates may name, the default first.
	Runtimes []string `json:"runtimes"`
	// Unavailable names those that cannot start sandboxes now, and why
	// (a container engine that is down); absent when all can.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// Cgroups says how native sandboxes are contained on this machine.
	Cgroups *Cgroups `json:"cgroups,omitempty"`
	// Isolation is the mode native sandboxes get unless their snapshot
	// says otherwise: "namespaces" or "off".
	Isolation string `json:"isolation"`
	// ReadyPath is what the daemon probes on a starting sandbox, and
	// StartupTimeoutMs how long it waits for it to answer.
	ReadyPath        string `json:"readyPath,omitempty"`
	StartupTimeoutMs int64  `json:"startupTimeoutMs,omitempty"`
	// StopGraceMs is how long a stop waits after SIGTERM before SIGKILL.
	StopGraceMs int64 `json:"stopGraceMs,omitempty"`
}

// Snapshot is one profile a create may name as its snapshot: what runs,
// on which runtime, probed how. Its command and env values are not shown.
type Snapshot struct {
	Name    string `json:"name"`
	Runtime string `json:"runtime"`
	// Image is what a docker snapshot runs; empty: the daemon's default.
	Image            string   `json:"image,omitempty"`
	ReadyPath        string   `json:"readyPath"`
	StartupTimeoutMs int64    `json:"startupTimeoutMs"`
	StopGraceMs      int64    `json:"stopGraceMs"`
	EnvKeys          []string `json:"envKeys,omitempty"` // the variables it sets, not their values
	// Default: the snapshot a create that names none runs.
	Default bool `json:"default,omitempty"`
}

// SnapshotList is GET /v1/snapshots.
type SnapshotList struct {
	Items []Snapshot `json:"items"`
}

// Cgroups describes the containment native sandboxes get.
type Cgroups struct {
	// Mode: "v2" (cgroup v2 contains and limits), "hybrid" (cgroup2
	// contains, cgroup v1 limits), "unavailable" or "off" (process groups
	// only).
	Mode string `json:"mode"`
	// Path is the daemon's subtree in the cgroup2 hierarchy.
	Path string `json:"path,omitempty"`
	// Limits lists the limits sandboxes can be given: cpu, memory, pids.
	Limits []string `json:"limits"`
	// Note says why containment or a limit is missing.
	Note string `json:"note,omitempty"`
}

// ErrorBody is every error answer: {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the code and message of an error answer.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ListResponse is the body of GET /v1/sandboxes.
type ListResponse struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
	// NextCursor, given with a limit when more sandboxes follow, is the
	// cursor of the next page.
	NextCursor string `json:"nextCursor,omitempty"`
}

// StreamEvent is the data of one SSE event on /v1/events.
type StreamEvent struct {
	Type      string        `json:"type"`
	Seq       uint64        `json:"seq"`
	Time      Time          `json:"time"`
	Sandbox   *SandboxInfo  `json:"sandbox,omitempty"`   // sandbox.* events
	Sandboxes []SandboxInfo `json:"sandboxes,omitempty"` // sandboxes_replaced
}

// MarshalJSON writes the event; a snapshot always carries its sandboxes
// array, empty or not.
func (e StreamEvent) MarshalJSON() ([]byte, error) {
	type plain StreamEvent
	if e.Type != EventReplaced {
		return json.Marshal(plain(e))
	}
	all := e.Sandboxes
	if all == nil {
		all = []SandboxInfo{}
	}
	return json.Marshal(struct {
		plain
		Sandboxes []SandboxInfo `json:"sandboxes"`
	}{plain(e), all})
}

// PreviewURLResponse is the body of GET .../preview-url.
type PreviewURLResponse struct {
	URL string `json:"url"`
}

// LogsResponse is the body of GET .../entrypoint-logs.
type LogsResponse struct {
	// Output is both streams merged in the order they were written (with
	// timestamps=true, each line after its time and a space).
	Output string    `json:"output"`
	Stdout string    `json:"stdout"`
	Stderr string    `json:"stderr"`
	Lines  []LogLine `json:"lines"`
	// Truncated: older lines the query picks are kept on disk but were
	// left out by the byte bound (all=true streams every one).
	Truncated bool `json:"truncated,omitempty"`
}

// Extracted is the answer of PUT .../archive: what the tar made.
type Extracted struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Links int   `json:"links"`
	Bytes int64 `json:"bytes"`
	// Skipped are the entries not made: hard links, devices, FIFOs.
	Skipped []string `json:"skipped,omitempty"`
}

// LogLine is one line of a sandbox's output (its newline kept; the last
// line, not yet ended, may have none) and when it was written, in
// LogTimeFormat.
type LogLine struct {
	Stream string `json:"stream"` // "stdout" or "stderr"
	Time   string `json:"time"`
	Text   string `json:"text"`
}

// LogTimeFormat is the time of a log line: RFC 3339, UTC, nanoseconds,
// always nine digits so that stamped lines align (as docker logs -t).
const LogTimeFormat = "2006-01-02T15:04:05.000000000Z"

// LogChunk is the data of a followed log's "stdout" and "stderr" events
// (GET .../entrypoint-logs?follow=true): a line, or a piece of a long
// one, redacted, and when it was written (LogTimeFormat).
type LogChunk struct {
	Text string `json:"text"`
	Time string `json:"time"`
}

// ParseSince reads a since parameter: an RFC 3339 time, a local date and
// time (2006-01-02T15:04:05 or 2006-01-02), or a duration before now
// (90s, 10m, 1h30m).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("since %q: a duration before now is positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("since %q is neither a duration (90s, 10m, 1h30m) nor a time (2026-12-01T15:04:05Z, 2026-12-01T15:04:05, 2026-12-01)", s)
}

// LogEventEnd is the event that ends a followed log: its data is the
// SandboxInfo, no longer running.
const LogEventEnd = "end"

// AutostopRequest is the body of POST .../autostop.
type AutostopRequest struct {
	Interval *float64 `json:"interval"`
}

// DashboardLink is the answer of POST /v1/dashboard/links: a one-time
// sign-in code for the dashboard, good for one use within a minute. The
// link is the daemon's address with "#code=" and the code: the code
// travels in the fragment, which browsers send to no server.
type DashboardLink struct {
	Code      string `json:"code"`
	LinkID    string `json:"linkId"` // names the session made from it
	ExpiresAt Time   `json:"expiresAt"`
}

// RedeemRequest is the body of POST /v1/dashboard/sessions.
type RedeemRequest struct {
	Code string `json:"code"`
}

// DashboardSession is one signed-in browser. Secret is set once, in the
// answer that made it, and never shown again.
type DashboardSession struct {
	ID         string `json:"id"`
	LinkID     string `json:"linkId"`
	CreatedAt  Time   `json:"createdAt"`
	ExpiresAt  Time   `json:"expiresAt"`
	LastUsedAt Time   `json:"lastUsedAt"`
	UserAgent  string `json:"userAgent,omitempty"`
	Current    bool   `json:"current,omitempty"` // the session that asked
	Secret     string `json:"secret,omitempty"`
}

// DashboardSessionList is the body of GET /v1/dashboard/sessions.
type DashboardSessionList struct {
	Items []DashboardSession `json:"items"`
}
