// Package snapshot declares what a configured snapshot says, for the
// configuration that reads it (package conf) and the supervisor that runs
// it, so that neither imports the other.
package snapshot

import "time"

// Default names the snapshot a create runs when it names none.
const Default = "default"

// Snapshot is what a sandbox runs: a named profile with
// its runtime, its program, how it is probed and how it is stopped. A
// create names one; what a sandbox was created from is kept in its record,
// so that a restart adopts and tears it down as it was made, whatever the
// configuration says by then.
type Snapshot struct {
	Name    string
	Runtime string // empty: the registry's default
	// Command is the argv, with environment references ("${PORT}") that
	// the runtime expands (runtime.ExpandArgv in package supervisor/runtime); empty: the runtime's
	// default.
	Command []string
	Image   string            // for a runtime that runs images; empty: its default
	Env     map[string]string // under the request's own variables
	// ReadyPath, StartupTimeout and StopGrace override the daemon's
	// defaults when set.
	ReadyPath      string
	StartupTimeout time.Duration
	StopGrace      *time.Duration
	// Isolation asks for "namespaces" or "off" whatever the daemon's
	// mode; empty: the daemon's.
	Isolation string
	// Mounts are what an isolated sandbox sees of the host besides its
	// system directories and its workspace.
	Mounts []Mount
}

// Mount is a directory (or file) of the host an isolated sandbox sees at
// Target (Source's own path when empty), read-only unless ReadWrite.
type Mount struct {
	Source    string `toml:"source" json:"source"`
	Target    string `toml:"target" json:"target,omitempty"`
	ReadWrite bool   `toml:"read_write" json:"readWrite,omitempty"`
}
