package daemon

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// burstSlack is how much more memory than after its last release the Go
// runtime must hold before the daemon gives it back again.
const burstSlack = 4 << 20

// releaser returns the supervisor's OnQuiet: once a burst is over, a
// collection and every free page back to the OS (release), but only when
// the runtime holds burstSlack more than after the last release (held).
// After a lone event there is little to give back, and giving it would
// only make the next create fault its pages in again.
func releaser(held func() uint64, release func()) func() {
	var mu sync.Mutex
	var after uint64 // held after the last release; 0 before the first
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if after != 0 && held() < after+burstSlack {
			return
		}
		release()
		after = held()
	}
}

// goHeld is the memory the Go runtime holds from the OS: all it has
// mapped read-write, less the heap pages it has given back.
func goHeld() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

// releaseAfterBursts is the daemon's OnQuiet.
func releaseAfterBursts() func() { return releaser(goHeld, debug.FreeOSMemory) }
