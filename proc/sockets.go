package proc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listening reports whether one of pids holds a TCP socket (IPv4 or IPv6)
// listening on port in this process's network namespace: the listening
// sockets are asked of the kernel (sock_diag, which walks only the
// listening table, filtered by port: /proc/net/tcp lists every socket and
// took milliseconds on a busy machine), their owners read from each pid's
// descriptors. A pid that is gone, or whose descriptors cannot be read,
// holds none.
func Listening(port int, pids []int) (bool, error) {
	inodes := map[string]bool{}
	if err := diagListeners(port, inodes); err != nil {
		// No sock_diag (a kernel without it): the tables in /proc.
		for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
			if err := listeners(table, port, inodes); err != nil && !os.IsNotExist(err) {
				return false, err
			}
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			link, err := os.Readlink(dir + e.Name())
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return true, nil
			}
		}
	}
	return false, nil
}

// ListeningIn reports whether a socket listens on TCP port in the network
// namespace of process pid (one of its own, whose every listener is its
// processes').
func ListeningIn(pid, port int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		if err := listeners("/proc/"+strconv.Itoa(pid)+"/net/"+table, port, inodes); err != nil && !os.IsNotExist(err) {
			return false, err
		}
	}
	return len(inodes) > 0, nil
}

// diagListeners adds the inodes of the TCP sockets listening on port,
// IPv4 and IPv6, asked of the kernel over NETLINK_SOCK_DIAG.
func diagListeners(port int, inodes map[string]bool) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 32<<10)
	for _, family := range []byte{unix.AF_INET, unix.AF_INET6} {
		// struct nlmsghdr, then struct inet_diag_req_v2: family,
		// protocol, ext, pad, states; inet_diag_sockid: sport (big
		// endian) first, the rest zero.
		req := make([]byte, unix.NLMSG_HDRLEN+56)
		binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
		binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		r := req[unix.NLMSG_HDRLEN:]
		r[0], r[1] = family, unix.IPPROTO_TCP
		binary.NativeEndian.PutUint32(r[4:], 1<<tcpListen)
		binary.BigEndian.PutUint16(r[8:], uint16(port))
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		if err := diagReplies(fd, buf, port, inodes); err != nil {
			return err
		}
	}
	return nil
}

// tcpListen is the kernel's TCP_LISTEN state.
const tcpListen = 10

// diagReplies reads a dump's replies (struct inet_diag_msg: family,
// state, timer, retrans, the sockid, expires, rqueue, wqueue, uid, inode)
// to its end.
func diagReplies(fd int, buf []byte, port int, inodes map[string]bool) error {
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return syscall.Errno(-e)
					}
				}
				return nil
			}
			if len(m.Data) < 72 || m.Data[1] != tcpListen || int(binary.BigEndian.Uint16(m.Data[4:])) != port {
				continue
			}
			inodes[strconv.FormatUint(uint64(binary.NativeEndian.Uint32(m.Data[68:])), 10)] = true
		}
	}
}

// listeners adds the inodes of the sockets table lists in state LISTEN
// on port.
func listeners(table string, port int, inodes map[string]bool) error {
	f, err := os.Open(table)
	if err != nil {
		return err
	}
	defer f.Close()
	want := []byte(fmt.Sprintf(":%04X", port))
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fields) < 10 || !bytes.HasSuffix(fields[1], want) || string(fields[3]) != "0A" {
			continue
		}
		inodes[string(fields[9])] = true
	}
	return sc.Err()
}

// MarkedPIDs lists the processes that carry marker, in one pass over
// /proc (for reading only: nothing is signalled on its word).
func MarkedPIDs(marker string) []int {
	if marker == "" {
		return nil
	}
	pids, _ := markedPIDs(map[string]bool{marker: true})
	return pids
}
