package isolate

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loopbackUp brings up the network namespace's loopback.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// NetworkWait is how long the init waits for the tap device the daemon's
// pasta makes.
const NetworkWait = 10 * time.Second

// awaitNetwork waits for pasta to configure the tap device (its default
// route is the last thing it sets) and, with an allow list, leaves routes
// to those networks only.
func awaitNetwork(allow []string, dns string) error {
	deadline := time.Now().Add(NetworkWait)
	var gw defaultRoute
	for {
		var err error
		if gw, err = readDefaultRoute(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's network did not come up within %s (%v)", NetworkWait, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(allow) == 0 {
		return nil
	}
	// The routing table is the policy: only the allowed networks have a
	// route; the rest is unreachable. Nothing the sandbox starts has
	// the capability to change it.
	cmds := [][]string{{"route", "flush", "dev", gw.dev}, {"-6", "route", "flush", "dev", gw.dev}}
	if dns != "" {
		allow = append(allow, dns+"/32") // its resolver, whatever the list
	}
	for _, cidr := range allow {
		cmds = append(cmds, []string{"route", "add", cidr, "via", gw.via.String(), "dev", gw.dev, "onlink"})
	}
	for _, args := range cmds {
		if err := ip(args...); err != nil {
			return fmt.Errorf("the network allow list: %w", err)
		}
	}
	return nil
}

type defaultRoute struct {
	dev string
	via net.IP
}

// readDefaultRoute reads the IPv4 default route from /proc/net/route.
func readDefaultRoute() (defaultRoute, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return defaultRoute{}, err
	}
	defer f.Close()
	return parseDefaultRoute(f)
}

// parseDefaultRoute finds the default route in a /proc/net/route table
// (addresses in the kernel's byte order, hexadecimal).
func parseDefaultRoute(r io.Reader) (defaultRoute, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[1] != "00000000" {
			continue
		}
		b, err := hex.DecodeString(fs[2])
		if err != nil || len(b) != 4 {
			continue
		}
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.LittleEndian.Uint32(b))
		return defaultRoute{dev: fs[0], via: ip}, nil
	}
	return defaultRoute{}, errors.New("no default route yet")
}

// ip runs iproute2's ip with the init's network capability.
func ip(args ...string) error {
	path, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("iproute2's ip is needed for an allow list: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{unix.CAP_NET_ADMIN}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// dropCapabilities empties the calling thread's bounding set, so that
// nothing forked from it has a capability in the sandbox's namespaces (it
// could change the routes, or mount over what the sandbox sees), and sets
// its no_new_privs.
func dropCapabilities() error {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the ambient set: %w", err)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}
