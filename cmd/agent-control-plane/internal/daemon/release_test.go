package daemon

import (
	"runtime/debug"
	"testing"
)

// TestReleaser: the first quiet releases; a later one only once the
// runtime holds burstSlack more than after the last release.
func TestReleaser(t *testing.T) {
	held, releases := uint64(10<<20), 0
	q := releaser(func() uint64 { return held }, func() { releases++; held -= 1 << 20 })
	q()
	if releases != 1 {
		t.Fatalf("first quiet: %d releases, want 1", releases)
	}
	held += burstSlack / 2 // a lone event's garbage
	q()
	if releases != 1 {
		t.Fatalf("quiet after a little growth released (%d releases)", releases)
	}
	held += burstSlack // a burst
	q()
	if releases != 2 {
		t.Fatalf("quiet after a burst: %d releases, want 2", releases)
	}
}

// TestGoHeld: the runtime's account moves with a real release: what a
// collection frees and FreeOSMemory gives back leaves it smaller.
func TestGoHeld(t *testing.T) {
	junk := make([][]byte, 0, 64)
	for range 64 {
		junk = append(junk, make([]byte, 256<<10))
	}
	before := goHeld()
	junk = nil
	_ = junk
	debug.FreeOSMemory()
	if after := goHeld(); after >= before {
		t.Fatalf("held %d bytes before a release of 16 MiB of garbage, %d after", before, after)
	}
}
