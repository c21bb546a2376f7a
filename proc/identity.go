package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const errESRCH = syscall.ESRCH

// MarkerEnv is the environment variable that carries a process's marker. A
// process is ours only if its initial environment, as /proc/<pid>/environ
// shows it, holds MarkerEnv=<marker> exactly.
const MarkerEnv = "AGENT_CONTROL_PLANE_MARKER"

// Identity is what proves that a PID still names the process we started. It
// is recorded at spawn and persisted so that a restarted daemon can tell its
// children from strangers that reuse their PIDs.
type Identity struct {
	PID       int    `json:"pid"`
	PGID      int    `json:"pgid"`
	StartTime uint64 `json:"startTime"` // clock ticks after boot, /proc/<pid>/stat field 22
	BootID    string `json:"bootId"`
	Marker    string `json:"marker"`
	// Cgroup is the process's cgroup2 path (as /proc/<pid>/cgroup shows
	// it) when it was born into one; empty otherwise.
	Cgroup string `json:"cgroup,omitempty"`
}

var (
	// ErrNotFound means no process has the recorded PID any more.
	ErrNotFound = errors.New("process not found")
	// ErrIdentity means a process has the recorded PID but it is not the one
	// that was recorded (another boot, another start time or no marker).
	ErrIdentity = errors.New("process identity does not match")
	// ErrExited means the process has already exited.
	ErrExited = errors.New("process already exited")
)

var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

// BootID returns the id of the running kernel boot.
func BootID() (string, error) { return bootID() }

// procStat is the part of /proc/<pid>/stat that identity checks need.
type procStat struct {
	state     byte
	pgid      int
	startTime uint64
}

// readProc reads /proc/<pid>/<name>; a process that is gone is ErrNotFound.
func readProc(pid int, name string) ([]byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + name)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
		return nil, ErrNotFound
	}
	return b, err
}

// Resident is the memory process pid has resident, in bytes (its RSS,
// from /proc/<pid>/statm).
func Resident(pid int) (int64, error) {
	b, err := readProc(pid, "statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/statm: %q", pid, b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/statm: %w", pid, err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// SchedStat is what the scheduler counted for a process, all its threads
// together (each thread's /proc/<pid>/task/<tid>/schedstat), to the
// nanosecond, where /proc/<pid>/stat counts clock ticks.
type SchedStat struct {
	Ran    time.Duration // on a CPU
	Waited time.Duration // runnable, waiting in a run queue for a CPU
}

// Sched reads process pid's SchedStat. A thread that ends between two
// reads is missed from the second. A process that is gone is ErrNotFound.
func Sched(pid int) (SchedStat, error) {
	var st SchedStat
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if errors.Is(err, os.ErrNotExist) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, err
	}
	for _, t := range tasks {
		b, err := readProc(pid, "task/"+t.Name()+"/schedstat")
		if errors.Is(err, ErrNotFound) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return st, err
		}
		var ran, waited int64
		if _, err := fmt.Sscan(string(b), &ran, &waited); err != nil {
			return st, fmt.Errorf("/proc/%d/task/%s/schedstat %q: %w", pid, t.Name(), b, err)
		}
		st.Ran += time.Duration(ran)
		st.Waited += time.Duration(waited)
	}
	return st, nil
}

// readStat parses /proc/<pid>/stat. The command name (field 2) may contain
// spaces and parentheses, so parsing starts after its last ')'.
func readStat(pid int) (procStat, error) {
	b, err := readProc(pid, "stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("malformed stat")
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed stat: %d fields", len(f))
	}
	pgid, err := strconv.Atoi(f[5-3]) // field 5: pgrp
	if err != nil {
		return procStat{}, fmt.Errorf("malformed stat pgrp: %w", err)
	}
	st, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed stat starttime: %w", err)
	}
	return procStat{state: f[0][0], pgid: pgid, startTime: st}, nil
}

// environSettle bounds how long readEnviron reads an empty environment
// again. A process in the middle of execve shows none for an instant: the
// kernel reads /proc/<pid>/environ as empty until the new image's stack is
// laid out, which is after the exec has closed the descriptors its parent
// waits on, so a spawn can return inside that instant.
const environSettle = 100 * time.Millisecond

// readEnviron returns the initial environment of pid, NUL-separated. Given
// the pidfd that pins pid (pidfd >= 0), an empty environment is read again,
// every millisecond, while that process lives, for up to environSettle; one
// that ends meanwhile is not waited on. Only a process expected to be ours is
// read that way; a scan over every process passes -1 and does not settle
// (kernel threads and zombies have empty environments too).
func readEnviron(pid, pidfd int) ([]byte, error) {
	deadline := time.Now().Add(environSettle)
	for {
		b, err := readProc(pid, "environ")
		if err != nil || len(b) > 0 || pidfd < 0 || pidfdReadable(pidfd) || time.Now().After(deadline) {
			return b, err
		}
		time.Sleep(time.Millisecond)
	}
}

// readMarker returns the MarkerEnv value in the initial environment of pid,
// or "" if it has none; pidfd is readEnviron's.
func readMarker(pid, pidfd int) (string, error) {
	b, err := readEnviron(pid, pidfd)
	if err != nil {
		return "", err
	}
	return markerIn(b), nil
}

func markerIn(environ []byte) string {
	prefix := []byte(MarkerEnv + "=")
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if m, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(m)
		}
	}
	return ""
}

// verify checks that the process now named id.PID is the one id describes:
// same boot, same start time, the recorded process group is its own, and
// its environment carries the marker. It must be called after a pidfd for
// id.PID has been opened: the pidfd then pins that process, and a match
// proves the pidfd refers to ours.
func verify(id Identity, pidfd int) error {
	boot, err := BootID()
	if err != nil {
		return err
	}
	if id.BootID != boot {
		// The machine restarted since: that process is certainly gone,
		// whoever has its PID now.
		return fmt.Errorf("%w: recorded in another boot", ErrNotFound)
	}
	st, err := readStat(id.PID)
	if err != nil {
		return err
	}
	if st.state == 'Z' || st.state == 'X' {
		return ErrExited
	}
	if st.startTime != id.StartTime {
		return fmt.Errorf("%w: start time %d, recorded %d", ErrIdentity, st.startTime, id.StartTime)
	}
	// The group every signal goes to must be the verified process's own:
	// a record that names another group (a stranger's) chooses whom to
	// kill, so it is not ours.
	if st.pgid != id.PGID {
		return fmt.Errorf("%w: process group %d, recorded %d", ErrIdentity, st.pgid, id.PGID)
	}
	m, err := readMarker(id.PID, pidfd)
	if err != nil {
		return err
	}
	if m != id.Marker {
		return fmt.Errorf("%w: marker missing", ErrIdentity)
	}
	if id.Cgroup != "" {
		cg, err := ReadCgroups(id.PID)
		if err != nil {
			return err
		}
		if cg[""] != id.Cgroup {
			return fmt.Errorf("%w: cgroup %q, recorded %q", ErrIdentity, cg[""], id.Cgroup)
		}
	}
	return nil
}

// Cgroups maps each cgroup hierarchy a process belongs to, by controller
// name, to the process's path in it: "" is the cgroup2 (unified)
// hierarchy, "memory", "pids", "cpu" and so on the v1 ones (a hierarchy
// with several controllers appears under each), "name=systemd" a named one.
type Cgroups map[string]string

// ReadCgroups reads /proc/<pid>/cgroup; pid 0 is this process.
func ReadCgroups(pid int) (Cgroups, error) {
	var b []byte
	var err error
	if pid == 0 {
		b, err = os.ReadFile("/proc/self/cgroup")
	} else {
		b, err = readProc(pid, "cgroup")
	}
	if err != nil {
		return nil, err
	}
	return ParseCgroups(b), nil
}

// ParseCgroups parses the content of /proc/<pid>/cgroup: lines of
// "id:controllers:path". Malformed lines are skipped.
func ParseCgroups(b []byte) Cgroups {
	out := Cgroups{}
	for _, line := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if ctrls == "" {
			out[""] = path
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			out[c] = path
		}
	}
	return out
}
