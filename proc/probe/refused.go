package probe

import (
	"errors"
	"net/netip"
	"net/url"
	"strconv"

	"golang.org/x/sys/unix"
)

// refused reports whether a connection to ap (a URL's address and port:
// see address) is refused right now. It is the probe's first look,
// because a starting workload refuses every probe until it listens: a
// non-blocking connect whose outcome is read without waiting. On loopback
// the kernel answers a connect (a reset, or the handshake) before the call
// returns, so this costs four system calls on one goroutine, where a dial
// through the runtime's network poller costs a registration and goroutine
// and thread switches: about 0.3 ms of CPU on a 2-CPU VM, every
// millisecond, for every sandbox starting, beside the child that is
// trying to start. Anything but a sure refusal (accepted, not answered
// yet, any error) is false, and the HTTP request decides.
func refused(ap netip.AddrPort) bool {
	var sa unix.Sockaddr
	family := unix.AF_INET
	if addr := ap.Addr(); addr.Is4() {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: addr.As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: addr.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	switch err := unix.Connect(fd, sa); {
	case errors.Is(err, unix.ECONNREFUSED):
		return true
	case !errors.Is(err, unix.EINPROGRESS):
		return false
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return false
	}
	soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	return err == nil && unix.Errno(soErr) == unix.ECONNREFUSED
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
