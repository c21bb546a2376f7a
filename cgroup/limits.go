package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// Limits are what a group enforces, in the kernel's terms; zero means no
// limit. The native runtime converts them from and to the runtime
// contract's, so that this package knows nothing of sandboxes.
type Limits struct {
	MilliCPU    int64 // thousandths of a CPU: the quota of a 100 ms period
	MemoryBytes int64
	Pids        int64
}

// IsZero reports whether l sets no limit.
func (l Limits) IsZero() bool { return l == Limits{} }

// has reports whether l sets the limit called c (LimitCPU, …).
func (l Limits) has(c string) bool {
	switch c {
	case LimitCPU:
		return l.MilliCPU > 0
	case LimitMemory:
		return l.MemoryBytes > 0
	case LimitPids:
		return l.Pids > 0
	}
	return false
}

// Usage is what a group's processes consume: CPU time so far, memory and
// tasks now.
type Usage struct {
	CPUSeconds  float64
	MemoryBytes int64
	Pids        int64
}

// MilliCPUFromQuota is the CPU limit, in thousandths of a CPU, that a
// quota of quotaMicros per periodMicros enforces (rounded to the nearest
// when another hand set a quota finer than that).
func MilliCPUFromQuota(quotaMicros, periodMicros int64) int64 {
	if quotaMicros <= 0 || periodMicros <= 0 {
		return 0
	}
	return (quotaMicros*1000 + periodMicros/2) / periodMicros
}

// Set applies the limits r, zero fields lifting a limit. It may be called
// while the group runs: a limit of a v1 hierarchy the group is not in yet
// makes its group there, limited, and moves the group's processes into it.
// A v1 group made for limits that could not be set is removed again, if
// nothing was moved into it yet.
// Calls must not overlap.
func (g *Group) Set(r Limits) (err error) {
	if err := g.m.Supports(r); err != nil {
		return err
	}
	var join []string
	defer func() {
		if err != nil && len(join) > 0 {
			g.dropV1(join)
		}
	}()
	for c := range g.m.v1 {
		if r.has(c) && g.v1s()[c] == "" {
			if err := g.makeV1(c); err != nil {
				return err
			}
			join = append(join, c)
		}
	}
	if err := g.set(r); err != nil {
		return err
	}
	for _, c := range join {
		if err := g.moveIntoV1(c); err != nil {
			return err
		}
	}
	return nil
}

func (g *Group) set(r Limits) error {
	var errs []error
	set := func(limit string, v2 func(dir string) error, v1 func(dir string) error) {
		errs = append(errs, g.atLimit(limit, v2, v1))
	}
	quota := cpuQuota(r.MilliCPU)
	set(LimitCPU, func(dir string) error {
		q := "max"
		if quota > 0 {
			q = strconv.FormatInt(quota, 10)
		}
		return writeFile(filepath.Join(dir, "cpu.max"), q+" "+strconv.Itoa(period))
	}, func(dir string) error {
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
			return err
		}
		return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
	})
	set(LimitMemory, func(dir string) error {
		v := maxOr(r.MemoryBytes)
		if err := writeFile(filepath.Join(dir, "memory.max"), v); err != nil {
			return err
		}
		// The limit is on memory, not memory plus swap: with swap a hog
		// would crawl instead of ending.
		if sw := filepath.Join(dir, "memory.swap.max"); exists(sw) {
			if r.MemoryBytes > 0 {
				return writeFile(sw, "0")
			}
			return writeFile(sw, "max")
		}
		return nil
	}, func(dir string) error {
		v := "-1"
		if r.MemoryBytes > 0 {
			v = strconv.FormatInt(r.MemoryBytes, 10)
		}
		mem, memsw := filepath.Join(dir, "memory.limit_in_bytes"), filepath.Join(dir, "memory.memsw.limit_in_bytes")
		if !exists(memsw) {
			return writeFile(mem, v)
		}
		// memory ≤ memory+swap at every step: lowering sets memory
		// first, raising memory+swap first.
		if err := writeFile(mem, v); err != nil {
			if err2 := writeFile(memsw, v); err2 != nil {
				return err2
			}
			return writeFile(mem, v)
		}
		return writeFile(memsw, v)
	})
	set(LimitPids, func(dir string) error {
		return writeFile(filepath.Join(dir, "pids.max"), maxOr(r.Pids))
	}, func(dir string) error {
		return writeFile(filepath.Join(dir, "pids.max"), maxOr(r.Pids))
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("set cgroup limits: %w", err)
	}
	return nil
}

// period is the cpu limit's period in µs, the kernel's default.
const period = 100000

// cpuQuota is the quota per period that enforces milli thousandths of a
// CPU, -1 for none: exact (a thousandth of the period is 100 µs), at
// least the kernel's 1 ms.
func cpuQuota(milli int64) int64 {
	if milli <= 0 {
		return -1
	}
	return max(1000, milli*period/1000)
}

// atLimit runs v2 on the group's cgroup2 directory when limit is a v2
// controller there, else v1 on the directory of limit's v1 hierarchy, if
// the group has one; otherwise nothing.
func (g *Group) atLimit(limit string, v2, v1 func(dir string) error) error {
	switch p := g.v1s()[limit]; {
	case g.m.v2limits[limit]:
		return v2(g.m.dir(g.path))
	case p != "":
		return v1(g.m.v1[limit].dir(p))
	}
	return nil
}

// Limits reads the limits in force in the group: what the kernel
// enforces, whatever a record says.
func (g *Group) Limits() (Limits, error) {
	var r Limits
	var errs []error
	read := func(limit string, v2 func(dir string) error, v1 func(dir string) error) {
		errs = append(errs, g.atLimit(limit, v2, v1))
	}
	read(LimitCPU, func(dir string) error {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return err
		}
		q, p, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		quota, _ := strconv.ParseInt(q, 10, 64) // "max": 0, no limit
		per, _ := strconv.ParseInt(p, 10, 64)
		r.MilliCPU = MilliCPUFromQuota(quota, per)
		return nil
	}, func(dir string) error {
		quota, err := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			return err
		}
		per, err := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		r.MilliCPU = MilliCPUFromQuota(quota, per)
		return err
	})
	read(LimitMemory, func(dir string) error {
		r.MemoryBytes = readMax(filepath.Join(dir, "memory.max"))
		return nil
	}, func(dir string) error {
		v, err := readInt(filepath.Join(dir, "memory.limit_in_bytes"))
		if v > 0 && v < 1<<62 { // "no limit" reads as a huge number
			r.MemoryBytes = v
		}
		return err
	})
	pids := func(dir string) error {
		r.Pids = readMax(filepath.Join(dir, "pids.max"))
		return nil
	}
	read(LimitPids, pids, pids)
	return r, errors.Join(errs...)
}

// readMax reads a cgroup value that is a number or "max" (0).
func readMax(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func maxOr(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// Usage reads what the group's processes consume now.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	dir := g.m.dir(g.path)
	stat, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	u.CPUSeconds = float64(stat["usage_usec"]) / 1e6
	v1 := g.v1s()
	if g.m.v2limits[LimitMemory] {
		u.MemoryBytes, _ = readInt(filepath.Join(dir, "memory.current"))
	} else {
		// No cgroup2 memory controller over the group: what its
		// processes have resident (shared pages counted in each; no page
		// cache), limit or none. A v1 memory group made for a limit is
		// not read: it is charged only what was faulted in after the
		// processes joined it (2.9 MiB of a 14 MiB agent, and nothing
		// just after a resize moved them), so the figure would change
		// with the limit.
		procs, _ := readLines(filepath.Join(dir, "cgroup.procs"))
		for _, pid := range procs {
			if n, err := strconv.Atoi(pid); err == nil {
				rss, _ := proc.Resident(n)
				u.MemoryBytes += rss
			}
		}
	}
	if g.m.v2limits[LimitPids] {
		u.Pids, _ = readInt(filepath.Join(dir, "pids.current"))
	} else if p := v1[LimitPids]; p != "" {
		u.Pids, _ = readInt(filepath.Join(g.m.v1[LimitPids].dir(p), "pids.current"))
	} else if threads, err := readLines(filepath.Join(dir, "cgroup.threads")); err == nil {
		u.Pids = int64(len(threads))
	}
	return u, nil
}

// OOMKills is how many processes the kernel killed in the group for
// exceeding its memory limit.
func (g *Group) OOMKills() int64 {
	if g.m.v2limits[LimitMemory] {
		ev, _ := readKeyed(filepath.Join(g.m.dir(g.path), "memory.events"))
		return ev["oom_kill"]
	}
	if p := g.v1s()[LimitMemory]; p != "" {
		ev, _ := readKeyed(filepath.Join(g.m.v1[LimitMemory].dir(p), "memory.oom_control"))
		return ev["oom_kill"]
	}
	return 0
}

// readKeyed reads a flat-keyed cgroup file ("key value" lines).
func readKeyed(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
