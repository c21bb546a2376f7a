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
}
