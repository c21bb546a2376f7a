package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
)

// File names inside a sandbox directory <root>/<id>/ (and the logs,
// logcap.Stdout and logcap.Stderr).
const (
	RecordFile   = "sandbox.json"
	EnvFile      = "runtime-env.json"
	WorkspaceDir = "workspace"
)

// Bounds on what the daemon reads back from its own files.
const (
	maxRecordBytes = 1 << 20
	maxEnvBytes    = 16 << 20
)

// recordVersion is written to every record. Older versions are upgraded on
// load; newer ones are refused rather than misread. Version 2 added rootId;
// version 3 wraps the handle in a runtime.HandleState (its own version and
// data), where version 2 held the native runtime's data bare.
const recordVersion = 3

// Record is the persisted form of a sandbox: sandbox.json. It holds no env
// values.
type Record struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	// RootID is the root mark's id: the proof that the directory holding
	// this record is the daemon's to remove.
	RootID  string            `json:"rootId"`
	Runtime string            `json:"runtime"`
	State   State             `json:"state"`
	Labels  map[string]string `json:"labels,omitempty"`
	Volumes []VolumeMount     `json:"volumes,omitempty"`
	// Network and Isolation: see Sandbox (added within version 3).
	Network   runtime.Network `json:"network,omitzero"`
	Isolation string          `json:"isolation,omitempty"`
	Snapshot  string          `json:"snapshot,omitempty"`
	Public    bool            `json:"public,omitempty"`
	Port      int             `json:"port"`
	// Endpoint is where the workload serves, as its runtime reported it
	// (added within version 3: absent means the loopback at Port).
	Endpoint       runtime.Endpoint `json:"endpoint,omitzero"`
	CreatedAt      time.Time        `json:"createdAt"`
	UpdatedAt      time.Time        `json:"updatedAt"`
	LastActivityAt time.Time        `json:"lastActivityAt"`
	StartedAt      *time.Time       `json:"startedAt,omitempty"`
	StoppedAt      *time.Time       `json:"stoppedAt,omitempty"`
	// LaunchedAt: see Sandbox.LaunchedAt (added within version 3: absent
	// means CreatedAt).
	LaunchedAt   *time.Time `json:"launchedAt,omitempty"`
	AutoStopMs   int64      `json:"autoStopIntervalMs"`
	AutoDeleteMs *int64     `json:"autoDeleteIntervalMs,omitempty"`
	// Extensions: see Sandbox.Extensions (added within version 3). A
	// field of the record this version does not know (one a face kept
	// in the record before extensions were) is read into the extension
	// RecordExtension, so that nothing is lost.
	Extensions  Extensions `json:"extensions,omitempty"`
	ErrorReason string     `json:"errorReason,omitempty"`
	StopReason  StopReason `json:"stopReason,omitempty"`
	StopGraceMs int64      `json:"stopGraceMs"` // teardown parameters travel with the record
	// ReadyPath and StartupTimeoutMs are how the sandbox's readiness is
	// probed, from its snapshot (added within version 3: absent means
	// the daemon's defaults).
	ReadyPath        string `json:"readyPath,omitempty"`
	StartupTimeoutMs int64  `json:"startupTimeoutMs,omitempty"`
	Marker           string `json:"marker"`
	// StartingMarker is the marker of a workload being started again in
	// a stopped sandbox (Start), written before it runs: a daemon that
	// finds it sweeps that marker and keeps the sandbox stopped.
	StartingMarker string               `json:"startingMarker,omitempty"`
	Handle         *runtime.HandleState `json:"handle,omitempty"`
	// Resources are the limits in force (added within version 3: absent
	// means none).
	Resources recordResources `json:"resources,omitzero"`
}

// recordResources are the limits a record keeps. Records written before
// the cpu limit was kept in thousandths of a CPU hold it as "cpu", in
// CPUs; reading such a record converts it (to the nearest thousandth,
// which is what the kernel was given).
type recordResources struct {
	runtime.Resources
	LegacyCPU float64 `json:"cpu,omitempty"`
}

func (r recordResources) current() runtime.Resources {
	res := r.Resources
	if res.MilliCPU == 0 && r.LegacyCPU > 0 {
		res.MilliCPU = max(1, int64(math.Round(r.LegacyCPU*1000)))
	}
	return res
}

// toRecord is e's record with sb as its state.
func (s *Supervisor) toRecord(e *sandbox, sb Sandbox, handle runtime.HandleState) Record {
	r := Record{
		Version: recordVersion, ID: sb.ID, RootID: s.fs.id, Runtime: sb.Runtime, State: sb.State,
		Labels: sb.Labels, Volumes: sb.Volumes, Network: sb.Network, Isolation: sb.Isolation, Snapshot: sb.Snapshot, Public: sb.Public, Port: sb.Port, Endpoint: sb.Endpoint,
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, LastActivityAt: sb.LastActivityAt,
		AutoStopMs: sb.AutoStopInterval.Milliseconds(), Extensions: sb.Extensions, ErrorReason: sb.ErrorReason,
		StopReason: sb.StopReason, StopGraceMs: e.grace.Milliseconds(), Marker: e.marker,
		ReadyPath: e.readyPath, StartupTimeoutMs: e.startup.Milliseconds(),
		Resources: recordResources{Resources: sb.Resources},
	}
	if !handle.IsZero() {
		r.Handle = &handle
	}
	if !sb.StartedAt.IsZero() {
		t := sb.StartedAt
		r.StartedAt = &t
	}
	if !sb.StoppedAt.IsZero() {
		t := sb.StoppedAt
		r.StoppedAt = &t
	}
	if !sb.LaunchedAt.IsZero() {
		t := sb.LaunchedAt
		r.LaunchedAt = &t
	}
	if sb.AutoDeleteInterval != nil {
		ms := sb.AutoDeleteInterval.Milliseconds()
		r.AutoDeleteMs = &ms
	}
	return r
}

func (r Record) sandbox() Sandbox {
	sb := Sandbox{
		ID: r.ID, Runtime: r.Runtime, State: r.State, Labels: r.Labels, Volumes: r.Volumes,
		Network: r.Network, Isolation: r.Isolation, Snapshot: r.Snapshot, Public: r.Public, Port: r.Port, Endpoint: r.Endpoint,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastActivityAt: r.LastActivityAt,
		AutoStopInterval: time.Duration(r.AutoStopMs) * time.Millisecond,
		Extensions:       r.Extensions.clone(),
		ErrorReason:      r.ErrorReason, StopReason: r.StopReason,
		Resources: r.Resources.current(),
	}
	if r.StartedAt != nil {
		sb.StartedAt = *r.StartedAt
	}
	if r.StoppedAt != nil {
		sb.StoppedAt = *r.StoppedAt
	}
	if r.LaunchedAt != nil {
		sb.LaunchedAt = *r.LaunchedAt
	}
	if r.AutoDeleteMs != nil {
		d := time.Duration(*r.AutoDeleteMs) * time.Millisecond
		sb.AutoDeleteInterval = &d
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	if sb.Endpoint.IsZero() && r.Port != 0 {
		sb.Endpoint = runtime.Loopback(r.Port) // written before endpoints
	}
	return sb
}

// errForeignRecord is a record that does not name this root: the
// directory holding it is not provably the daemon's.
var errForeignRecord = errors.New("record does not belong to this root")

func (r *Record) validate(dirName, rootID string) error {
	switch {
	case r.RootID != rootID:
		return errForeignRecord
	case r.Version < 2 || r.Version > recordVersion:
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

// readRecord reads and validates the record of sandbox directory name.
func (s *Supervisor) readRecord(name string) (Record, error) {
	b, err := s.fs.ReadFile(name+"/"+RecordFile, maxRecordBytes)
	if err != nil {
		return Record{}, err
	}
	r, err := DecodeRecord(b)
	if err != nil {
		return Record{}, err
	}
	if err := r.validate(name, s.fs.id); err != nil {
		return Record{}, err
	}
	return r, nil
}

// DecodeRecord decodes a sandbox.json, upgrading older versions, without
// checking it against a root. It is for tools that read a root from
// outside (tests, the bench); the daemon reads through readRecord.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	// A record this version wrote is decoded once; only one that holds a
	// field this version does not know (an older or a newer daemon's) is
	// read again for it (keepUnknown): re-adoption reads every record.
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	if strict.Decode(&r) != nil || strict.Decode(new(json.RawMessage)) != io.EOF { // the fallback says what is wrong
		r = Record{}
		if err := json.Unmarshal(b, &r); err != nil {
			return Record{}, fmt.Errorf("decode: %w", err)
		}
		if err := r.keepUnknown(b); err != nil {
			return Record{}, fmt.Errorf("decode: %w", err)
		}
	}
	if r.Version == 2 {
		// The handle was the native runtime's data, bare: its version 1.
		var v2 struct{ Handle json.RawMessage }
		if err := json.Unmarshal(b, &v2); err != nil {
			return Record{}, fmt.Errorf("decode: %w", err)
		}
		r.Handle = nil
		if len(v2.Handle) > 0 && string(v2.Handle) != "null" {
			r.Handle = &runtime.HandleState{Version: 1, Data: v2.Handle}
		}
	}
	return r, nil
}

// keepUnknown keeps the top-level fields of b that Record does not know
// as the extension RecordExtension (an object of them), unless the
// record has one already.
func (r *Record) keepUnknown(b []byte) error {
	if _, ok := r.Extensions[RecordExtension]; ok {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	for _, name := range recordFields {
		delete(fields, name)
	}
	if len(fields) == 0 {
		return nil
	}
	kept, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	r.Extensions = r.Extensions.with(RecordExtension, kept)
	return nil
}

// recordFields are the names of Record's fields in JSON.
var recordFields = func() []string {
	var out []string
	t := reflect.TypeFor[Record]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}()

// writeRecord writes e's sandbox.json atomically and, with durable, durably:
// temp file, rename, fsync of the file and the directory, one journal
// commit (securefs.SyncAfterRename). The power loss that could leave it
// empty on some file systems leaves a record that rehydration calls
// corrupt and leaves alone, with its directory.
func (s *Supervisor) writeRecord(dir string, r Record, durable bool) error {
	mode := securefs.NoSync
	if durable {
		mode = securefs.SyncAfterRename
	}
	return withIndented(r, func(b []byte) error { return s.fs.writeAtomic(dir, RecordFile, b, mode) })
}

// indented encodes the daemon's own files (records, the env file) as
// json.MarshalIndent with two spaces and a final newline would, in a
// buffer kept for the next file: MarshalIndent copies the text twice
// more, and a create writes three such files.
type indented struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var indentedPool = sync.Pool{New: func() any {
	x := &indented{}
	x.enc = json.NewEncoder(&x.buf)
	x.enc.SetIndent("", "  ")
	return x
}}

// withIndented calls use with v encoded; the bytes are use's only during
// the call.
func withIndented(v any, use func([]byte) error) error {
	x := indentedPool.Get().(*indented)
	x.buf.Reset()
	defer func() {
		if x.buf.Cap() <= 64<<10 { // an env file of many variables is not kept
			indentedPool.Put(x)
		}
	}()
	if err := x.enc.Encode(v); err != nil {
		return err
	}
	return use(x.buf.Bytes())
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

// lockRoot takes the root's lock file. The file is opened as the daemon's
// own (no link followed, non-blocking, regular files only) and is
// truncated only once the lock is held.
func lockRoot(r *rootFS) (*rootLock, error) {
	f, err := r.OpenFile(lockFile, unix.O_RDWR|unix.O_CREAT|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open root lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open root lock: %s is not a regular file", r.Abs(lockFile))
	}
	// A daemon killed while it was forking a child leaves that child
	// holding a copy of the lock until it execs (the lock is close-on-exec)
	// or dies, a few milliseconds, more on a loaded machine. While the pid
	// the lock names is gone, wait for that instead of refusing.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
		if err == unix.EWOULDBLOCK && pid > 0 && unix.Kill(pid, 0) == unix.ESRCH && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, &ErrRootLocked{Root: r.Path(), PID: pid}
		}
		return nil, fmt.Errorf("lock root: %w", err)
	}
	_ = f.Chmod(0o600)
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &rootLock{f: f}, nil
}

func (l *rootLock) release() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}

// maxSignInsFile bounds the dashboard's sessions file.
const maxSignInsFile = 1 << 20

// LoadSignIns reads the dashboard's sessions file (SignInsFile) through
// the root's own rules: never through a link, only a regular file,
// bounded.
func (s *Supervisor) LoadSignIns() ([]byte, error) {
	return s.fs.ReadFile(SignInsFile, maxSignInsFile)
}

// SaveSignIns replaces the dashboard's sessions file atomically (mode
// 0600; a temporary file an interrupted write leaves is removed at the
// next start).
func (s *Supervisor) SaveSignIns(b []byte) error {
	return s.fs.writeAtomic("", SignInsFile, b, securefs.SyncBeforeRename)
}

// envOf is the variables e was created with (runtime-env.json): what a
// start again gives its workload, and whose secret values redaction hides.
func (s *Supervisor) envOf(e *sandbox) (map[string]string, error) {
	b, err := s.fs.ReadFile(e.id+"/"+EnvFile, maxEnvBytes)
	if errors.Is(err, securefs.ErrNotOwnFile) {
		return nil, fmt.Errorf("%w: %s of %s is a link or not a regular file; left as it is", ErrTampered, EnvFile, e.id)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvFile, err)
	}
	var env map[string]string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvFile, err)
	}
	return env, nil
}
