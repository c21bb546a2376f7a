// Package limits holds the bounds of the limits a sandbox may be given,
// in the core's units (thousandths of a CPU, bytes, tasks), and the
// conversions from the units people write them in (CPUs and GiB, with
// fractions): the faces and the configuration convert at their edge with
// these, the supervisor checks with Check, runtimes receive
// runtime.Resources.
package limits

import (
	"fmt"
	"math"
	goruntime "runtime"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// GiB is 2³⁰ bytes.
const GiB = 1 << 30

// Bounds of the limits a sandbox may be given: a cpu limit is at least
// 1 ms of each 100 ms period (so 10 thousandths of a CPU is the least),
// memory at least what a workload needs to exec.
const (
	MaxMilliCPU = 1024 * 1000
	MinMilliCPU = 10
	MinMemory   = 16 << 20 // below this a workload cannot even exec
	MaxMemory   = 1 << 50
	MaxPids     = 1 << 22
)

// Check returns r as it is enforced (memory in whole pages), or a
// *field.Error naming the limit out of bounds; zero means no limit. One
// rule: a value is refused when it is below what can be enforced, never
// turned into "no limit"; what is kept (and reported) is what is
// enforced.
func Check(r runtime.Resources) (runtime.Resources, error) {
	switch {
	case r.MilliCPU < 0 || r.MilliCPU > MaxMilliCPU:
		return runtime.Resources{}, field.Errorf(field.CPU, "must be between 0 (no limit) and %d CPUs; fractions are allowed", MaxMilliCPU/1000)
	case r.MilliCPU > 0 && r.MilliCPU < MinMilliCPU:
		return runtime.Resources{}, field.Errorf(field.CPU, "must be 0 (no limit) or at least %g CPUs: the kernel enforces no less", float64(MinMilliCPU)/1000)
	case r.MemoryBytes < 0 || r.MemoryBytes > MaxMemory:
		return runtime.Resources{}, field.Errorf(field.Memory, "must be between 0 (no limit) and %d GiB; fractions are allowed (0.25 is 256 MiB)", MaxMemory/GiB)
	case r.MemoryBytes > 0 && r.MemoryBytes < MinMemory:
		return runtime.Resources{}, field.Errorf(field.Memory, "must be 0 (no limit) or at least %g GiB (16 MiB)", float64(MinMemory)/GiB)
	case r.Pids < 0 || r.Pids > MaxPids:
		return runtime.Resources{}, field.Errorf(field.Pids, "must be between 0 (no limit) and %d", MaxPids)
	}
	r.MemoryBytes = r.MemoryBytes / runtime.PageSize * runtime.PageSize
	return r, nil
}

// MachineMilliCPU is this machine's CPUs in thousandths: the most a
// runtime on this machine can give a sandbox.
func MachineMilliCPU() int64 { return int64(goruntime.NumCPU()) * 1000 }

// OverMachine is an error wrapping runtime.ErrLimitsUnsupported when r
// asks for more CPUs than this machine has (who: the runtime, as the
// error names it), nil otherwise.
func OverMachine(r runtime.Resources, who string) error {
	if max := MachineMilliCPU(); r.MilliCPU > max {
		return fmt.Errorf("%w: cpu %g: %s takes %g to %d CPUs (the CPUs of this machine), or 0 for no limit", runtime.ErrLimitsUnsupported, CPUs(r.MilliCPU), who, CPUs(MinMilliCPU), max/1000)
	}
	return nil
}

// MilliCPU converts CPUs to thousandths of a CPU, to the nearest. A
// value that is not a number, is negative or too large to convert is a
// *field.Error; a positive value too small to be a thousandth stays
// positive, so that Check refuses it rather than lifting the limit.
func MilliCPU(cpus float64) (int64, error) {
	if math.IsNaN(cpus) || cpus < 0 || cpus > MaxMilliCPU/1000 {
		return 0, field.Errorf(field.CPU, "must be between 0 (no limit) and %d CPUs; fractions are allowed", MaxMilliCPU/1000)
	}
	m := int64(math.Round(cpus * 1000))
	if cpus > 0 && m == 0 {
		m = 1
	}
	return m, nil
}

// Bytes converts GiB to bytes, down to a whole byte; as MilliCPU, a bad
// value is a *field.Error and a positive one stays positive.
func Bytes(gib float64) (int64, error) {
	if math.IsNaN(gib) || gib < 0 || gib > MaxMemory/GiB {
		return 0, field.Errorf(field.Memory, "must be between 0 (no limit) and %d GiB; fractions are allowed (0.25 is 256 MiB)", MaxMemory/GiB)
	}
	b := int64(gib * GiB)
	if gib > 0 && b == 0 {
		b = 1
	}
	return b, nil
}

// CPUs is milli thousandths of a CPU in CPUs.
func CPUs(milli int64) float64 { return float64(milli) / 1000 }

// InGiB is bytes in GiB.
func InGiB(bytes int64) float64 { return float64(bytes) / GiB }

// FromUnits converts limits written in CPUs and GiB, each nil when not
// given, to the core's; pids are a number in both.
func FromUnits(cpus, gib *float64) (milliCPU, bytes *int64, err error) {
	if cpus != nil {
		m, err := MilliCPU(*cpus)
		if err != nil {
			return nil, nil, err
		}
		milliCPU = &m
	}
	if gib != nil {
		b, err := Bytes(*gib)
		if err != nil {
			return nil, nil, err
		}
		bytes = &b
	}
	return milliCPU, bytes, nil
}
