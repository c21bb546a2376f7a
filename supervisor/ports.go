package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ports leases TCP ports from a range. A port is handed out only after a
// bind proves it free, and never to two holders at once.
type ports struct {
	lo, hi int
	mu     sync.Mutex
	used   map[int]string // port → sandbox id
	next   int
	probe  func(port int) bool
}

func newPorts(lo, hi int) *ports {
	return &ports{lo: lo, hi: hi, used: map[int]string{}, next: lo, probe: portFree}
}

// Where the kernel says which local ports it gives outgoing connections.
const (
	ephemeralRangeFile    = "/proc/sys/net/ipv4/ip_local_port_range"
	ephemeralReservedFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"
)

// ephemeralOverlap counts the ports of lo..hi that the kernel may give an
// outgoing connection as its local port (inside the ephemeral range, not
// reserved), and says that range. A leased port is proved free by a bind,
// but the workload binds it a moment later: a connection opened between
// the two (the readiness probe of another sandbox, any client on the
// machine) can take it, and the workload fails with "address already in
// use" (one create in 500 in a burst here).
func ephemeralOverlap(lo, hi int, rangeFile, reservedFile string) (n int, eph string, err error) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, "", err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, "", fmt.Errorf("%s: %q is not a range", rangeFile, b)
	}
	elo, err1 := strconv.Atoi(f[0])
	ehi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, "", fmt.Errorf("%s: %q is not a range", rangeFile, b)
	}
	reserved := func(int) bool { return false }
	if b, err := os.ReadFile(reservedFile); err == nil {
		var spans [][2]int
		for _, item := range strings.Split(strings.TrimSpace(string(b)), ",") {
			a, z, isSpan := strings.Cut(item, "-")
			x, err1 := strconv.Atoi(a)
			y, err2 := x, error(nil)
			if isSpan {
				y, err2 = strconv.Atoi(z)
			}
			if err1 == nil && err2 == nil {
				spans = append(spans, [2]int{x, y})
			}
		}
		reserved = func(p int) bool {
			for _, sp := range spans {
				if sp[0] <= p && p <= sp[1] {
					return true
				}
			}
			return false
		}
	}
	for p := max(lo, elo); p <= min(hi, ehi); p++ {
		if !reserved(p) {
			n++
		}
	}
	return n, fmt.Sprintf("%d-%d", elo, ehi), nil
}

// portFree reports whether 127.0.0.1:port can be bound now. It binds a bare
// socket, as a listener would (SO_REUSEADDR, so connections lingering in
// TIME_WAIT do not count as taken), without listening or registering with
// the runtime's poller: a tenth of the cost of net.Listen.
func portFree(port int) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return false
	}
	return unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}) == nil
}

// leaseAgain leases prev for id again when it is in the range, no sandbox
// holds it and it is free (a sandbox started again keeps its address),
// else any port as lease does.
func (p *ports) leaseAgain(id string, prev int) (int, error) {
	if prev >= p.lo && prev <= p.hi {
		p.mu.Lock()
		_, taken := p.used[prev]
		if !taken {
			p.used[prev] = id
		}
		p.mu.Unlock()
		if !taken {
			if p.probe(prev) {
				return prev, nil
			}
			p.release(prev, id)
		}
	}
	return p.lease(id)
}

// lease returns a free port for id, or ErrPortsExhausted. Ports held by
// foreign processes are skipped. The search starts after the last port
// handed out, so a just-released port is not reused at once. The bind
// that proves a port free runs outside the lock, on a port already held
// for id, so that concurrent leases never queue behind a syscall.
func (p *ports) lease(id string) (int, error) {
	for range p.hi - p.lo + 1 {
		port, ok := p.hold(id)
		if !ok {
			break
		}
		if p.probe(port) {
			return port, nil
		}
		p.release(port, id)
	}
	return 0, ErrPortsExhausted
}

// hold takes the next port no sandbox holds for id.
func (p *ports) hold(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.hi - p.lo + 1 {
		port := p.next
		p.next++
		if p.next > p.hi {
			p.next = p.lo
		}
		if _, taken := p.used[port]; !taken {
			p.used[port] = id
			return port, true
		}
	}
	return 0, false
}

// claim records port as held by id without probing: a re-adopted child is
// listening on it. It reports false if another sandbox holds it.
func (p *ports) claim(port int, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if holder, taken := p.used[port]; taken && holder != id {
		return false
	}
	p.used[port] = id
	return true
}

// release frees port if id holds it.
func (p *ports) release(port int, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used[port] == id {
		delete(p.used, port)
	}
}

func (p *ports) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}
