// Package limits holds the units and bounds of the limits a sandbox may be
// given, as Daytona's API states them (CPUs, GiB of memory) plus a number
// of tasks: the API, the configuration and the supervisor check limits
// here, and runtimes receive them as runtime.Resources.
package limits

import (
	"fmt"
	"math"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// GiB is the unit of Daytona's memory field.
const GiB = 1 << 30

// Bounds of the limits a sandbox may be given: a cpu limit is at least
// 1 ms of each 100 ms period (so 0.01 CPU is the least), memory at least
// what a workload needs to exec.
const (
	MaxCPU       = 1024
	MinCPU       = 0.01
	MinMemory    = 16 << 20 // below this a workload cannot even exec
	MaxMemoryGiB = 1 << 20
	MaxPids      = 1 << 22
)

// New checks limits given in Daytona's units (CPUs, GiB of
// memory) plus a number of tasks; zero means no limit. Its errors name the
// field at fault.
func New(cpu, memoryGiB float64, pids int64) (runtime.Resources, error) {
	switch {
	case math.IsNaN(cpu) || cpu < 0 || cpu > MaxCPU:
		return runtime.Resources{}, fmt.Errorf("cpu must be between 0 (no limit) and %d CPUs; fractions are allowed", MaxCPU)
	case math.IsNaN(memoryGiB) || memoryGiB < 0 || memoryGiB > MaxMemoryGiB:
		return runtime.Resources{}, fmt.Errorf("memory must be between 0 (no limit) and %d GiB; fractions are allowed (0.25 is 256 MiB)", MaxMemoryGiB)
	case pids < 0 || pids > MaxPids:
		return runtime.Resources{}, fmt.Errorf("pids must be between 0 (no limit) and %d", MaxPids)
	}
	// One rule: a value is refused when it is below what can be
	// enforced, never turned into "no limit"; what is kept (and
	// reported) is what is enforced.
	if cpu > 0 && cpu < MinCPU {
		return runtime.Resources{}, fmt.Errorf("cpu must be 0 (no limit) or at least %g CPUs: the kernel enforces no less", MinCPU)
	}
	if memoryGiB > 0 && memoryGiB*GiB < MinMemory {
		return runtime.Resources{}, fmt.Errorf("memory must be 0 (no limit) or at least %g GiB (16 MiB)", float64(MinMemory)/GiB)
	}
	return runtime.Resources{
		CPU:         cpu,
		MemoryBytes: int64(memoryGiB*GiB) / runtime.PageSize * runtime.PageSize,
		Pids:        pids,
	}.Normalized(), nil
}

// MemoryGiB is r's memory limit in Daytona's unit.
func MemoryGiB(r runtime.Resources) float64 { return float64(r.MemoryBytes) / GiB }
