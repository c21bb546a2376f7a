package limits

import (
	"errors"
	"math"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// One rule, from the units people write to what is enforced: a value
// below what can be enforced is refused, never turned into no limit.
func TestOneRule(t *testing.T) {
	for _, c := range []struct {
		cpu, mem float64
		pids     int64
		ok       bool
		field    string
	}{
		{1e-12, 0, 0, false, field.CPU}, {0.009, 0, 0, false, field.CPU}, {0.01, 0, 0, true, ""},
		{0, 1e-10, 0, false, field.Memory}, {0, 0.001, 0, false, field.Memory}, {0, 1.0 / 64, 0, true, ""},
		{0, 0, 0, true, ""}, {-1, 0, 0, false, field.CPU}, {0, -1, 0, false, field.Memory}, {0, 0, -1, false, field.Pids},
		{MaxMilliCPU/1000 + 1, 0, 0, false, field.CPU}, {math.NaN(), 0, 0, false, field.CPU}, {0, math.Inf(1), 0, false, field.Memory},
		{0, 0, MaxPids + 1, false, field.Pids},
	} {
		cpu, mem, err := FromUnits(&c.cpu, &c.mem)
		if err == nil {
			_, err = Check(runtime.Resources{MilliCPU: *cpu, MemoryBytes: *mem, Pids: c.pids})
		}
		var fe *field.Error
		if (err == nil) != c.ok || err != nil && (!errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, field.ErrInvalid)) {
			t.Errorf("cpu %g, memory %g GiB, pids %d: %v, want ok %v (field %q)", c.cpu, c.mem, c.pids, err, c.ok, c.field)
		}
	}
	cpu, mem, _ := FromUnits(ptr(0.123456789), ptr(0.2))
	r, err := Check(runtime.Resources{MilliCPU: *cpu, MemoryBytes: *mem, Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.MilliCPU != 123 || r.MemoryBytes%runtime.PageSize != 0 || float64(r.MemoryBytes) > 0.2*GiB || float64(r.MemoryBytes) <= 0.2*GiB-runtime.PageSize {
		t.Errorf("kept %+v: want the cpu in thousandths and memory in whole pages", r)
	}
	if CPUs(r.MilliCPU) != 0.123 || InGiB(1<<29) != 0.5 {
		t.Error("CPUs or InGiB do not convert back")
	}
}

func ptr[T any](v T) *T { return &v }
