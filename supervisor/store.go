package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// File names inside a sandbox directory <root>/<id>/.
const (
	RecordFile   = "sandbox.json"
	EnvFile      = "runtime-env.json"
	StdoutFile   = "stdout.log"
	StderrFile   = "stderr.log"
	WorkspaceDir = "workspace"
	lockFile     = ".lock"
	trashPrefix  = ".trash-"
)

// recordVersion is written to every record. Older versions are upgraded on
// load; newer ones are refused rather than misread.
const recordVersion = 1

// record is the persisted form of a sandbox: sandbox.json. It holds no env
// values.
type record struct {
	Version        int               `json:"version"`
	ID             string            `json:"id"`
	Runtime        string            `json:"runtime"`
	State          State             `json:"state"`
	Labels         map[string]string `json:"labels,omitempty"`
	Snapshot       string            `json:"snapshot,omitempty"`
	Public         bool              `json:"public,omitempty"`
	Port           int               `json:"port"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
	LastActivityAt time.Time         `json:"lastActivityAt"`
	StartedAt      *time.Time        `json:"startedAt,omitempty"`
	StoppedAt      *time.Time        `json:"stoppedAt,omitempty"`
	AutoStopMs     int64             `json:"autoStopIntervalMs"`
	AutoDeleteMs   *int64            `json:"autoDeleteIntervalMs,omitempty"`
	ErrorReason    string            `json:"errorReason,omitempty"`
	StopReason     StopReason        `json:"stopReason,omitempty"`
	StopGraceMs    int64             `json:"stopGraceMs"` // teardown parameters travel with the record
	Marker         string            `json:"marker"`
	Handle         json.RawMessage   `json:"handle,omitempty"`
}

func toRecord(sb Sandbox, marker string, grace time.Duration, handle json.RawMessage) record {
	r := record{
		Version: recordVersion, ID: sb.ID, Runtime: sb.Runtime, State: sb.State,
		Labels: sb.Labels, Snapshot: sb.Snapshot, Public: sb.Public, Port: sb.Port,
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, LastActivityAt: sb.LastActivityAt,
		AutoStopMs: sb.AutoStopInterval.Milliseconds(), ErrorReason: sb.ErrorReason,
		StopReason: sb.StopReason, StopGraceMs: grace.Milliseconds(), Marker: marker, Handle: handle,
	}
	if !sb.StartedAt.IsZero() {
		t := sb.StartedAt
		r.StartedAt = &t
	}
	if !sb.StoppedAt.IsZero() {
		t := sb.StoppedAt
		r.StoppedAt = &t
	}
	if sb.AutoDeleteInterval != nil {
		ms := sb.AutoDeleteInterval.Milliseconds()
		r.AutoDeleteMs = &ms
	}
	return r
}

func (r record) sandbox() Sandbox {
	sb := Sandbox{
		ID: r.ID, Runtime: r.Runtime, State: r.State, Labels: r.Labels,
		Snapshot: r.Snapshot, Public: r.Public, Port: r.Port,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastActivityAt: r.LastActivityAt,
		AutoStopInterval: time.Duration(r.AutoStopMs) * time.Millisecond,
		ErrorReason:      r.ErrorReason, StopReason: r.StopReason,
	}
	if r.StartedAt != nil {
		sb.StartedAt = *r.StartedAt
	}
	if r.StoppedAt != nil {
		sb.StoppedAt = *r.StoppedAt
	}
	if r.AutoDeleteMs != nil {
		d := time.Duration(*r.AutoDeleteMs) * time.Millisecond
		sb.AutoDeleteInterval = &d
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	return sb
}

func (r *record) validate(dirName string) error {
	switch {
	case r.Version < 1 || r.Version > recordVersion:
		return fmt.Errorf("unsupported record version %d", r.Version)
	case r.ID != dirName:
		return fmt.Errorf("record id %q does not match directory %q", r.ID, dirName)
	case !validName(r.ID):
		return fmt.Errorf("invalid id %q", r.ID)
	case r.Marker == "":
		return fmt.Errorf("record has no marker")
	}
	switch r.State {
	case Starting, Started, Stopped:
	default:
		return fmt.Errorf("invalid state %q", r.State)
	}
	return nil
}

func readRecord(path, dirName string) (record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return record{}, err
	}
	var r record
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&r); err != nil {
		return record{}, fmt.Errorf("decode: %w", err)
	}
	if err := r.validate(dirName); err != nil {
		return record{}, err
	}
	return r, nil
}

// writeFileAtomic writes data to path so that a reader, or the daemon after
// a crash of its own process at any point, sees either the old content or
// the new one, never a mix: a temp file created with its final mode,
// written, renamed over path. With durable, the temp file is fsynced
// before the rename and the directory after it, so the new content also
// survives a power loss; without, a power loss may lose the write (and,
// after one, every child is gone anyway: the boot id changes).
func writeFileAtomic(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes 0600 files; set the mode before any content exists.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if durable {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if durable {
		return syncDir(dir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeRecord writes sandbox.json atomically and durably (temp file,
// fsync, rename, fsync of the directory).
func writeRecord(dir string, r record) error {
	return writeRecordMode(dir, r, true)
}

func writeRecordMode(dir string, r record, durable bool) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, RecordFile), append(b, '\n'), 0o644, durable)
}

// rootLock is an exclusive flock on <root>/.lock, held for the daemon's life,
// so that two daemons never manage one root.
type rootLock struct{ f *os.File }

// ErrRootLocked is returned when another daemon holds the root.
type ErrRootLocked struct {
	Root string
	PID  int // 0 when unknown
}

func (e *ErrRootLocked) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("root %s is in use by another agent-control-plane (pid %d)", e.Root, e.PID)
	}
	return fmt.Sprintf("root %s is in use by another agent-control-plane", e.Root)
}

func lockRoot(root string) (*rootLock, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create root: %w", err)
	}
	path := filepath.Join(root, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open root lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, &ErrRootLocked{Root: root, PID: pid}
		}
		return nil, fmt.Errorf("lock root: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &rootLock{f: f}, nil
}

func (l *rootLock) release() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}
