package probe

import (
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// look is the probe's first look at ap (a URL's address and port: see
// address), because a starting workload refuses every probe until it
// listens: a non-blocking connect whose outcome is read without waiting.
// On loopback the kernel answers a connect (a reset, or the handshake)
// before the call returns, so a refusal costs three system calls on one
// goroutine (socket, connect, close), where a dial through the runtime's
// network poller costs a registration and goroutine and thread switches:
// about 0.3 ms of CPU on a 2-CPU VM, every millisecond, for every sandbox
// starting, beside the child that is trying to start.
//
// It reports refused only for a sure refusal. Otherwise it returns the
// connection it made (or is still making), when it could keep one, for
// the request to go on: the workload then sees one connection per probe,
// not an empty one before each request (and a probe costs one handshake
// and one accept in the workload, which is starting). With any error it
// returns neither, and the request dials and says what it got.
func look(ap netip.AddrPort) (refused bool, c net.Conn) {
	var buf sockaddr
	sa, salen, family := buf.set(ap)
	fd, errno := raw(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if errno != 0 {
		return false, nil
	}
	switch _, errno := raw(unix.SYS_CONNECT, fd, uintptr(sa), salen); errno {
	case 0:
	case unix.ECONNREFUSED:
		raw(unix.SYS_CLOSE, fd, 0, 0)
		return true, nil
	case unix.EINPROGRESS:
		// Still connecting, unless the kernel has answered already.
		pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
		var zero unix.Timespec
		if n, errno := raw(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero))); errno == 0 && n > 0 {
			var soErr int32
			size := uint32(unsafe.Sizeof(soErr))
			_, errno := raw6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&soErr)), uintptr(unsafe.Pointer(&size)), 0)
			if errno != 0 || soErr != 0 {
				raw(unix.SYS_CLOSE, fd, 0, 0)
				return errno == 0 && unix.Errno(soErr) == unix.ECONNREFUSED, nil
			}
		}
	default:
		raw(unix.SYS_CLOSE, fd, 0, 0)
		return false, nil
	}
	// net.FileConn takes a duplicate into the runtime's poller; a write
	// on a connection still being made waits there for the handshake.
	f := os.NewFile(fd, "probe")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return false, nil
	}
	return false, c
}

// raw and raw6 make the look's system calls without telling the
// scheduler, which is sound because none of them blocks (a non-blocking
// socket, a poll that does not wait). Through unix.Syscall each is entered
// as a call that may block: one entered while the runtime's sysmon thread
// sleeps wakes it, and it then polls every 20 µs for a millisecond or more;
// with a probe every millisecond it hardly rested while a workload
// started. Measured one create at a time (60 creates, three interleaved
// pairs): 17% fewer nanosleep calls (sysmon's polls), and 0.5–2.5 ms less
// daemon CPU from the create until started.
func raw(trap, a1, a2, a3 uintptr) (uintptr, unix.Errno) {
	r, _, errno := unix.RawSyscall(trap, a1, a2, a3)
	return r, errno
}

func raw6(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, unix.Errno) {
	r, _, errno := unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	return r, errno
}

// sockaddr is an address as the kernel takes it, on the caller's stack.
type sockaddr struct {
	in4 unix.RawSockaddrInet4
	in6 unix.RawSockaddrInet6
}

// set makes sa say ap, and returns it with its length and family.
func (sa *sockaddr) set(ap netip.AddrPort) (unsafe.Pointer, uintptr, int) {
	port := [2]byte{byte(ap.Port() >> 8), byte(ap.Port())} // network order
	if addr := ap.Addr(); addr.Is4() {
		sa.in4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr.As4()}
		*(*[2]byte)(unsafe.Pointer(&sa.in4.Port)) = port
		return unsafe.Pointer(&sa.in4), unix.SizeofSockaddrInet4, unix.AF_INET
	}
	sa.in6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
	*(*[2]byte)(unsafe.Pointer(&sa.in6.Port)) = port
	return unsafe.Pointer(&sa.in6), unix.SizeofSockaddrInet6, unix.AF_INET6
}

// address is u's host and port when the host is an IP address (an IPv4
// address mapped into IPv6 is the IPv4 one), the port by default the
// scheme's.
func address(u *url.URL) (netip.AddrPort, bool) {
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return netip.AddrPort{}, false
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "https":
		port = "443"
	default:
		port = "80"
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(n)), true
}
