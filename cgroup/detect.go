package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/proc"
)

// Mode says what containment a machine gives sandboxes.
type Mode string

const (
	ModeV2          Mode = "v2"          // pure cgroup v2: containment and limits
	ModeHybrid      Mode = "hybrid"      // cgroup2 contains, cgroup v1 limits
	ModeUnavailable Mode = "unavailable" // no usable cgroup: process groups only
	ModeOff         Mode = "off"         // turned off by configuration
)

// The limits a group can enforce, by name.
const (
	LimitCPU    = "cpu"
	LimitMemory = "memory"
	LimitPids   = "pids"
)

// v1Controllers are the cgroup v1 hierarchies used on a hybrid machine, by
// the limit each serves.
var v1Controllers = []string{LimitCPU, LimitMemory, LimitPids}

// Info describes what Detect found, for the log and /v1/info.
type Info struct {
	Mode Mode
	// Path is the daemon's subtree in the cgroup2 hierarchy, as
	// /proc/<pid>/cgroup shows paths; empty without containment.
	Path string
	// Limits lists the limits sandboxes can be given: cpu, memory, pids.
	Limits []string
	// Kill is how a group is ended: "cgroup.kill" or "freeze".
	Kill string
	// Note says why containment or some limit is missing; empty when
	// nothing is.
	Note string
}

// Contained reports whether sandboxes get a cgroup.
func (i Info) Contained() bool { return i.Mode == ModeV2 || i.Mode == ModeHybrid }

// Supports reports whether limit (LimitCPU, …) can be enforced.
func (i Info) Supports(limit string) bool { return slices.Contains(i.Limits, limit) }

// Manager owns the daemon's cgroup subtree. A nil *Manager stands for no
// containment (Info says why). Its methods are safe for concurrent use.
type Manager struct {
	info Info
	log  *slog.Logger

	v2mount string // where the cgroup2 hierarchy is mounted
	v2root  string // the mount's root within the hierarchy ("/" unless namespaced)
	base    string // the subtree's path in the hierarchy
	// v1 maps a limit to its v1 hierarchy on a hybrid machine.
	v1 map[string]v1Hierarchy
	// v2limits: the limit is a cgroup2 controller enabled for sandboxes.
	v2limits map[string]bool
	canKill  bool // cgroup.kill exists (Linux 5.14)

	watchOnce sync.Once
	watch     *emptyWatcher
	watchErr  error
}

// v1Hierarchy is one cgroup v1 hierarchy: where it is mounted, and the
// daemon's subtree in it.
type v1Hierarchy struct {
	mount string
	root  string // the mount's root within the hierarchy
	base  string // the subtree's path in the hierarchy
}

func (h v1Hierarchy) dir(path string) string { return hierDir(h.mount, h.root, path) }

// hierDir turns a path in a hierarchy into a directory on disk.
func hierDir(mount, root, path string) string {
	rel := strings.TrimPrefix(path, root)
	return filepath.Join(mount, filepath.FromSlash(rel))
}

// Options for Detect.
type Options struct {
	// Name is the daemon's subtree under its own cgroup, unique per
	// daemon root (two daemons on one machine must not share one).
	Name string
	// Off turns containment off: Detect returns an Info saying so.
	Off bool
	Log *slog.Logger
}

// Detect finds what the machine offers and prepares the daemon's subtree.
// It returns a nil Manager, and an Info saying why, when sandboxes cannot
// be contained; it never fails the daemon.
func Detect(o Options) (*Manager, Info) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Off {
		return nil, Info{Mode: ModeOff, Note: "turned off by configuration"}
	}
	if o.Name == "" || strings.ContainsAny(o.Name, "/\x00") || o.Name == "." || o.Name == ".." {
		return nil, Info{Mode: ModeUnavailable, Note: fmt.Sprintf("bad subtree name %q", o.Name)}
	}
	m, err := detect(o)
	if err != nil {
		return nil, Info{Mode: ModeUnavailable, Note: err.Error()}
	}
	return m, m.info
}

// detect finds the hierarchies native sandboxes can be contained in (the
// unified one, and on a hybrid machine the v1 controllers beside it), or
// says why there are none.
//
// It is long because it is one walk over the machine's mounts, the
// unified hierarchy first and the v1 controllers after, each step on what
// the one before found.
func detect(o Options) (*Manager, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	own, err := proc.ReadCgroups(0)
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	var v2 *mount
	for i := range mounts {
		mt := &mounts[i]
		if mt.fstype == "cgroup2" && (v2 == nil || mt.point == "/sys/fs/cgroup") {
			v2 = mt
		}
	}
	if v2 == nil {
		return nil, errors.New("no cgroup2 hierarchy is mounted")
	}
	ownPath, ok := own[""]
	if !ok {
		return nil, errors.New("this process is in no cgroup2 group")
	}
	m := &Manager{
		log: o.Log, v2mount: v2.point, v2root: v2.root,
		v1: map[string]v1Hierarchy{}, v2limits: map[string]bool{},
	}
	m.base = joinPath(ownPath, o.Name)
	ownDir := m.dir(ownPath)
	if err := mkdir(m.dir(m.base)); err != nil {
		return nil, fmt.Errorf("cannot create the daemon's cgroup under %s: %w", ownDir, err)
	}
	m.canKill = exists(filepath.Join(m.dir(m.base), "cgroup.kill"))
	m.info.Kill = "freeze"
	if m.canKill {
		m.info.Kill = "cgroup.kill"
	}
	m.info.Path = m.base

	hybrid := false
	for _, mt := range mounts {
		if mt.fstype != "cgroup" {
			continue
		}
		for _, c := range v1Controllers {
			if !slices.Contains(mt.options, c) {
				continue
			}
			hybrid = true
			path, ok := own[c]
			if !ok {
				continue
			}
			h := v1Hierarchy{mount: mt.point, root: mt.root, base: joinPath(path, o.Name)}
			if err := mkdir(h.dir(h.base)); err != nil {
				o.Log.Debug("cgroup v1 hierarchy not writable", "controller", c, "err", err)
				continue
			}
			m.v1[c] = h
		}
	}
	var notes []string
	if hybrid {
		m.info.Mode = ModeHybrid
		for _, c := range v1Controllers {
			if _, ok := m.v1[c]; ok {
				m.info.Limits = append(m.info.Limits, c)
			} else {
				notes = append(notes, "no writable cgroup v1 "+c+" hierarchy")
			}
		}
	} else {
		m.info.Mode = ModeV2
		enabled, err := m.enableControllers(ownPath, o.Name)
		for _, c := range v1Controllers {
			if enabled[c] {
				m.v2limits[c] = true
				m.info.Limits = append(m.info.Limits, c)
			}
		}
		if err != nil {
			notes = append(notes, err.Error())
		}
	}
	if !m.canKill {
		notes = append(notes, "no cgroup.kill (Linux 5.14): groups are ended by freezing them")
	}
	m.info.Note = strings.Join(notes, "; ")
	// The subtree was made to prove it can be; it is made again with the
	// first sandbox, so that a daemon with none leaves nothing behind.
	m.Prune()
	return m, nil
}

// ensureBase makes the daemon's subtree, in every hierarchy, if it is not
// there (Prune removes it when empty).
func (m *Manager) ensureBase() error {
	dir := m.dir(m.base)
	err := os.Mkdir(dir, 0o755)
	switch {
	case err == nil:
		var ctrls []string
		for _, c := range v1Controllers {
			if m.v2limits[c] {
				ctrls = append(ctrls, c)
			}
		}
		if len(ctrls) > 0 {
			if err := enable(dir, ctrls); err != nil {
				return fmt.Errorf("enable controllers below the daemon's cgroup: %w", err)
			}
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("create the daemon's cgroup: %w", err)
	}
	for c, h := range m.v1 {
		if err := mkdir(h.dir(h.base)); err != nil {
			return fmt.Errorf("create the daemon's cgroup v1 %s: %w", c, err)
		}
	}
	return nil
}

// enableControllers makes the cpu, memory and pids controllers available
// to the groups under the daemon's subtree: each cgroup from the daemon's
// own down to the subtree enables them for its children. A cgroup with
// processes in it cannot (the "no internal processes" rule), so a daemon
// alone in its cgroup, as a systemd service with Delegate=yes is, first
// moves itself into a leaf beside the subtree.
func (m *Manager) enableControllers(ownPath, name string) (map[string]bool, error) {
	ownDir := m.dir(ownPath)
	avail := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(ownDir, "cgroup.controllers"))
	if err != nil {
		return avail, fmt.Errorf("read cgroup.controllers: %w", err)
	}
	var want []string
	for _, c := range strings.Fields(string(b)) {
		if slices.Contains(v1Controllers, c) {
			want = append(want, c)
		}
	}
	if len(want) == 0 {
		return avail, errors.New("no cpu, memory or pids controller is delegated to the daemon's cgroup")
	}
	err = enable(ownDir, want)
	if errors.Is(err, unix.EBUSY) && ownPath != "/" {
		procs, _ := readLines(filepath.Join(ownDir, "cgroup.procs"))
		if len(procs) != 1 || procs[0] != strconv.Itoa(os.Getpid()) {
			return avail, fmt.Errorf("the daemon's cgroup %s holds other processes, so no controller can be enabled below it (run the daemon as a service with Delegate=yes for limits)", ownPath)
		}
		leaf := filepath.Join(ownDir, name+".daemon")
		if err := mkdir(leaf); err != nil {
			return avail, fmt.Errorf("create the daemon's leaf cgroup: %w", err)
		}
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return avail, fmt.Errorf("move the daemon into its leaf cgroup: %w", err)
		}
		err = enable(ownDir, want)
	}
	if err == nil {
		err = enable(m.dir(m.base), want)
	}
	if err != nil {
		return avail, fmt.Errorf("enable controllers %s: %w", strings.Join(want, " "), err)
	}
	for _, c := range want {
		avail[c] = true
	}
	return avail, nil
}

func enable(dir string, ctrls []string) error {
	var b strings.Builder
	for i, c := range ctrls {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), b.String())
}

// Info says what the manager offers.
func (m *Manager) Info() Info { return m.info }

// dir is the directory of a path in the cgroup2 hierarchy.
func (m *Manager) dir(path string) string { return hierDir(m.v2mount, m.v2root, path) }

// Close stops watching groups.
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	if m.watch != nil {
		m.watch.close()
	}
	return nil
}

// Prune removes the daemon's subtree if it is empty (sandboxes outlive the
// daemon by design: then it stays). Only the daemon that owns the root may
// call it: another daemon of the same root may be creating groups in it.
func (m *Manager) Prune() {
	if m == nil {
		return
	}
	_ = unix.Rmdir(m.dir(m.base))
	for _, h := range m.v1 {
		_ = unix.Rmdir(h.dir(h.base))
	}
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	root, point, fstype string
	options             []string // super options
}

func readMounts() ([]mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMounts(b), nil
}

// parseMounts reads the cgroup lines of mountinfo: "id parent major:minor
// root mountpoint options [optional…] - fstype source superoptions".
func parseMounts(b []byte) []mount {
	var out []mount
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		out = append(out, mount{root: unescape(f[3]), point: unescape(f[4]), fstype: g[0], options: strings.Split(g[2], ",")})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func joinPath(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

func mkdir(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	return err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFile writes one value to a cgroup file, as the kernel wants it: one
// write, no truncation, no creation.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}
