package probe

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// look is the probe's first look at ap (a URL's address and port: see
// address), because a starting workload refuses every probe until it
// listens: a non-blocking connect whose outcome is read without waiting.
// On loopback the kernel answers a connect (a reset, or the handshake)
// before the call returns, so a refusal costs four system calls on one
// goroutine, where a dial through the runtime's network poller costs a
// registration and goroutine and thread switches: about 0.3 ms of CPU on
// a 2-CPU VM, every millisecond, for every sandbox starting, beside the
// child that is trying to start.
//
// It reports refused only for a sure refusal. Otherwise it returns the
// connection it made (or is still making), when it could keep one, for
// the request to go on: the workload then sees one connection per probe,
// not an empty one before each request (and a probe costs one handshake
// and one accept in the workload, which is starting). With any error it
// returns neither, and the request dials and says what it got.
func look(ap netip.AddrPort) (refused bool, c net.Conn) {
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
		return false, nil
	}
	switch err := unix.Connect(fd, sa); {
	case err == nil:
	case errors.Is(err, unix.ECONNREFUSED):
		unix.Close(fd)
		return true, nil
	case !errors.Is(err, unix.EINPROGRESS):
		unix.Close(fd)
		return false, nil
	default:
		// Still connecting, unless the kernel has answered already.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err != nil || soErr != 0 {
				unix.Close(fd)
				return err == nil && unix.Errno(soErr) == unix.ECONNREFUSED, nil
			}
		}
	}
	// net.FileConn takes a duplicate into the runtime's poller; a write
	// on a connection still being made waits there for the handshake.
	f := os.NewFile(uintptr(fd), "probe")
	c, err = net.FileConn(f)
	f.Close()
	if err != nil {
		return false, nil
	}
	return false, c
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
