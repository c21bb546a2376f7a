package cgroup

import (
	"fmt"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// BenchmarkCreateRemove is the cgroup cost of one sandbox without a
// process: make its groups (every hierarchy), set no limits, remove them.
func BenchmarkCreateRemove(b *testing.B) {
	m, info := Detect(Options{Name: fmt.Sprintf("acp-bench-%d", b.N)})
	if m == nil {
		b.Skipf("no cgroups: %s", info.Note)
	}
	defer m.Prune()
	for i := 0; b.Loop(); i++ {
		g, err := m.Create(fmt.Sprintf("g%d", i), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// noV1 places a child in its cgroup2 group only.
type noV1 struct{ *Group }

func (noV1) Enter() (func() error, error) { return func() error { return nil }, nil }
func (noV1) NeedsThread() bool            { return false }

// BenchmarkSpawn spawns true into a group: with the thread's visit to the
// v1 groups (hybrid machines), and without.
func BenchmarkSpawn(b *testing.B) {
	m, info := Detect(Options{Name: fmt.Sprintf("acp-bench-spawn-%d", b.N)})
	if m == nil {
		b.Skipf("no cgroups: %s", info.Note)
	}
	defer m.Prune()
	// With limits, so that a hybrid machine gives it v1 groups.
	g, err := m.Create("g", Limits{MemoryBytes: 1 << 30, Pids: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Remove()
	for _, c := range []struct {
		name string
		p    proc.Placement
	}{{"v2+v1", g}, {"v2", noV1{g}}} {
		b.Run(c.name, func(b *testing.B) {
			w, err := proc.NewWatcher()
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			dir := b.TempDir()
			for i := 0; b.Loop(); i++ {
				p, err := w.Spawn(proc.Spec{Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir,
					Stdout: dir + "/o", Stderr: dir + "/e", Marker: fmt.Sprint("m", i), Cgroup: c.p})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
			}
		})
	}
}
