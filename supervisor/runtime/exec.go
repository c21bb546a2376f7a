package runtime

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"
)

// Execer is a Handle that runs commands inside its workload (Nomad's
// ExecTask, containerd's Task.Exec): in its cgroup and with its marker
// (native), in its container (docker), so that a stop or a sweep of the
// sandbox ends what an exec started too.
type Execer interface {
	// Exec starts spec and returns once it runs (or could not start: an
	// error wrapping ErrExecStart, nothing left running). The process is
	// killed when ctx ends, after spec.Timeout, and when the workload
	// stops; Wait says how it ended.
	Exec(ctx context.Context, spec ExecSpec) (Process, error)
}

// ExecSpec is a command to run inside a workload.
type ExecSpec struct {
	Argv []string // Argv[0] is looked up in the workload's PATH
	// Env is added to the workload's own environment (KEY=VALUE; a key
	// given again replaces its value). MarkerEnv cannot be set.
	Env []string
	// Dir is the working directory as the workload sees it; empty: its
	// workspace.
	Dir string
	// Stdin is read to the command's standard input, which is closed
	// at its end; nil: an empty input. Stdout and Stderr receive what it
	// writes; nil discards. With TTY both outputs go to Stdout.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Merged sends stderr to Stdout as one stream, in the order the
	// command writes (its stderr is its stdout, as with 2>&1); Stderr is
	// then unused.
	Merged bool
	// TTY gives the command a terminal, for an interactive shell: its
	// controlling terminal is stdin, stdout and stderr at once, so all
	// its output goes to Stdout, and the Process is a Terminal. Cols and
	// Rows are its first size (0: 80 by 24).
	TTY        bool
	Cols, Rows int
	// Timeout kills the command this long after it started (its Exit
	// then has Reason "timeout"); zero: no limit but ctx.
	Timeout time.Duration
}

// Process is one command started by Exec.
type Process interface {
	// Wait returns how the command ended, once it has and its output
	// has been copied, or ctx's error when ctx ends first (the command
	// runs on).
	Wait(ctx context.Context) (Exit, error)
	// Kill ends the command at once (SIGKILL). Killing one that has
	// ended is no error.
	Kill() error
}

// Terminal is a Process started with TTY.
type Terminal interface {
	Process
	// Resize changes the terminal's size; the command gets SIGWINCH.
	Resize(cols, rows int) error
}

// TerminalSize is cols by rows as a terminal is first given it: 80 by 24
// where either is not set, each at most MaxTerminalSide.
func TerminalSize(cols, rows int) (int, int) {
	if cols <= 0 || rows <= 0 {
		return 80, 24
	}
	return min(cols, MaxTerminalSide), min(rows, MaxTerminalSide)
}

// MaxTerminalSide is the most columns or rows a terminal has (Daytona's
// bound).
const MaxTerminalSide = 1000

// ReasonTimeout is Exit.Reason of an exec killed after its Timeout.
const ReasonTimeout = "timeout"

// ErrExecStart is wrapped by Exec when the command could not be started
// (no such program, a working directory that does not exist).
var ErrExecStart = errors.New("command could not start")

// Files is a Handle whose workload's files can be read and written from
// outside it, confined to what the workload may see. A name is a
// slash-separated path as the workload sees it: absolute, or relative to
// its workspace. A name that leads outside what the handle confines it to
// (through "..", an absolute path elsewhere, or a symbolic link) is
// refused with an error wrapping ErrOutside; nothing is followed there.
type Files interface {
	// WorkDir is the workspace as the workload sees it: where relative
	// names start, and where commands run by default.
	WorkDir() string
	// Stat describes name; a link is described, not followed.
	Stat(ctx context.Context, name string) (FileInfo, error)
	// List describes the entries of directory name, sorted by name.
	List(ctx context.Context, name string) ([]FileInfo, error)
	// Open opens regular file name for reading.
	Open(ctx context.Context, name string) (io.ReadCloser, FileInfo, error)
	// Write replaces (or creates) regular file name with what r gives,
	// with mode perm for a new file; a reader of name sees the old
	// content or the new, never a mix. It returns the bytes written.
	Write(ctx context.Context, name string, r io.Reader, perm fs.FileMode) (int64, error)
	// Mkdir makes directory name and any parents missing, mode perm.
	Mkdir(ctx context.Context, name string, perm fs.FileMode) error
	// Remove removes name; a directory that is not empty only with
	// recursive. Links inside are removed, never followed.
	Remove(ctx context.Context, name string, recursive bool) error
	// Rename moves from to to, replacing what is at to unless it is a
	// directory that is not empty.
	Rename(ctx context.Context, from, to string) error
	// Chmod sets name's permission bits.
	Chmod(ctx context.Context, name string, perm fs.FileMode) error
	// Symlink makes name a symbolic link to target, as written (the
	// file API never follows it out of the workspace).
	Symlink(ctx context.Context, target, name string) error
	// Resolve is name with every link on its way followed, as the
	// workload sees the result; a link whose target would lead out of
	// the workspace is refused (ErrOutside), never followed. A part that
	// does not exist is kept as named, so that a dangling link resolves
	// to the target it names.
	Resolve(ctx context.Context, name string) (string, error)
}

// AtRest is a runtime whose sandboxes keep their workspace on this
// machine while they are stopped: FilesAtRest are its files as the
// workload would see them (for copies out of and into stopped sandboxes,
// as docker cp does).
type AtRest interface {
	FilesAtRest(workspace string) Files
}

// FileInfo describes one file.
type FileInfo struct {
	Name    string      `json:"name"` // its last element
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"modTime"`
	// Link is a symbolic link's target, as written.
	Link string `json:"link,omitempty"`
	// Dev and Ino identify the file where the runtime can say (both 0
	// where it cannot): two names of one hard-linked file share them.
	Dev uint64 `json:"-"`
	Ino uint64 `json:"-"`
}

// IsDir reports whether fi describes a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// ErrOutside is wrapped by a Files method given a name outside what it is
// confined to.
var ErrOutside = errors.New("path leads outside the sandbox's files")
