package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Listening reports whether one of pids holds a TCP socket (IPv4 or IPv6)
// listening on port in this process's network namespace: the sockets are
// read from /proc/self/net, their owners from each pid's descriptors. A
// pid that is gone, or whose descriptors cannot be read, holds none.
func Listening(port int, pids []int) (bool, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		if err := listeners(table, port, inodes); err != nil && !os.IsNotExist(err) {
			return false, err
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if m, err := readMarker(pid, -1); err == nil && m == marker {
			out = append(out, pid)
		}
	}
	return out
}
