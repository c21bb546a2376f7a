package limits

import (
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

func TestNewOneRule(t *testing.T) {
	for _, c := range []struct {
		cpu, mem float64
		pids     int64
		ok       bool
	}{
		{1e-12, 0, 0, false}, {0.009, 0, 0, false}, {0.01, 0, 0, true},
		{0, 1e-10, 0, false}, {0, 0.001, 0, false}, {0, 1.0 / 64, 0, true},
		{0, 0, 0, true}, {-1, 0, 0, false}, {0, -1, 0, false}, {0, 0, -1, false},
		{MaxCPU + 1, 0, 0, false},
	} {
		_, err := New(c.cpu, c.mem, c.pids)
		if (err == nil) != c.ok {
			t.Errorf("New(%g, %g, %d): %v, want ok %v", c.cpu, c.mem, c.pids, err, c.ok)
		}
	}
	r, err := New(0.123456789, 0.2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU != 0.12346 || r.MemoryBytes%runtime.PageSize != 0 || float64(r.MemoryBytes) > 0.2*GiB || float64(r.MemoryBytes) <= 0.2*GiB-runtime.PageSize {
		t.Errorf("kept %+v: want the cpu at its 1 µs step and memory in whole pages", r)
	}
}
