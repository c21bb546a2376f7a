package supervisor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
	"golang.org/x/sys/unix"
)

// The root's own files.
const (
	// MarkFile marks a directory as an agent-control-plane root. The daemon
	// writes it when it initialises an empty or new directory, and refuses
	// to start on a non-empty directory without it.
	MarkFile = ".agent-control-plane-root"
	// markFormat is the mark's format version. A newer one is refused.
	markFormat = 1
	lockFile   = ".lock"
	// SignInsFile keeps the dashboard's browser sessions (package
	// api/signin decides what is in it; the supervisor reads and writes
	// it for it: LoadSignIns, SaveSignIns).
	SignInsFile = ".dashboard-sessions.json"
)

// ErrRootNotOurs is returned by New for a non-empty directory that holds no
// root mark: it may hold files that are not the daemon's.
var ErrRootNotOurs = errors.New("root is not an agent-control-plane root")

// rootMark is the content of MarkFile.
type rootMark struct {
	Format    int       `json:"format"`
	RootID    string    `json:"rootId"`
	CreatedAt time.Time `json:"createdAt"`
	// Secret keys the seals that prove what the daemon made outside its
	// root (containers, networks): never published, never logged. A root
	// marked before seals existed gets one at its next start.
	Secret string `json:"secret,omitempty"`
}

// rootFS is the daemon's only way into its root directory.
//
// What it guarantees:
//   - Every path is relative to the root and is resolved beneath it without
//     following any symbolic link (openat2 with RESOLVE_BENEATH and
//     RESOLVE_NO_SYMLINKS where the kernel has it, otherwise a walk of
//     O_NOFOLLOW opens, component by component), so that a link planted
//     where a log, record or directory should be is refused, never followed.
//   - Files are opened non-blocking and read only if they are regular
//     files: a FIFO or a device planted there can neither block a reader
//     nor be read.
//   - Modes are set explicitly, whatever the umask: files 0600, directories
//     0700.
//   - It removes only what it can prove it created: sandbox directories
//     whose record carries this root's id (checked by the caller), and
//     staging and trash directories whose names carry a tag derived from
//     the root's id (see tempName). Anything else is left alone.
type rootFS struct {
	*securefs.Dir        // the root, open for the daemon's life
	id            string // the mark's rootId: proof of ownership
	secret        []byte // the mark's secret: keys seals
}

// openRoot opens path as the daemon's root. A directory that does not exist
// or is empty is initialised with a mark; a non-empty directory without a
// mark is refused with ErrRootNotOurs, and nothing in it is touched.
func openRoot(path string) (_ *rootFS, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create root: %w", err)
	}
	created := false
	if err := os.Mkdir(path, 0o700); err == nil {
		created = true
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create root: %w", err)
	}
	// The root itself is the operator's choice and may be reached through
	// a link; nothing beneath it is.
	d, err := securefs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	r := &rootFS{Dir: d}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if created {
		if err := os.Chmod(path, 0o700); err != nil {
			return nil, fmt.Errorf("create root: %w", err)
		}
	}
	b, err := r.ReadFile(MarkFile, 4096)
	switch {
	case err == nil:
		var m rootMark
		if err := json.Unmarshal(b, &m); err != nil || m.RootID == "" {
			return nil, fmt.Errorf("root %s: %s is unreadable; restore it or choose another root", path, MarkFile)
		}
		if m.Format > markFormat {
			return nil, fmt.Errorf("root %s was written by a newer agent-control-plane (root format %d; this one reads %d)", path, m.Format, markFormat)
		}
		r.id = m.RootID
		if m.Secret == "" {
			m.Secret = newSecret()
			b, _ := json.Marshal(m)
			if err := r.writeAtomic("", MarkFile, append(b, '\n'), securefs.SyncBeforeRename); err != nil {
				return nil, fmt.Errorf("root %s: add a secret to %s: %w", path, MarkFile, err)
			}
		}
		if r.secret, err = hex.DecodeString(m.Secret); err != nil || len(r.secret) < 16 {
			return nil, fmt.Errorf("root %s: %s has an unreadable secret; restore it or choose another root", path, MarkFile)
		}
		return r, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("root %s: %s: %w", path, MarkFile, err)
	}
	names, err := d.Names()
	if err != nil {
		return nil, fmt.Errorf("read root: %w", err)
	}
	if len(names) > 0 {
		return nil, fmt.Errorf("%w: %s is not empty and has no %s mark, so it may hold files that are not agent-control-plane's; choose an empty or new directory (the default is ~/.local/state/agent-control-plane/sandboxes)", ErrRootNotOurs, path, MarkFile)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	secret := newSecret()
	m, _ := json.Marshal(rootMark{Format: markFormat, RootID: hex.EncodeToString(id), CreatedAt: time.Now().UTC(), Secret: secret})
	if err := r.writeAtomic("", MarkFile, append(m, '\n'), securefs.SyncBeforeRename); err != nil {
		return nil, fmt.Errorf("mark root: %w", err)
	}
	r.id = hex.EncodeToString(id)
	r.secret, _ = hex.DecodeString(secret)
	return r, nil
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// seal proves that the daemon of this root made what bears name: an HMAC
// of name under the root's secret. A copy of a label (an image committed
// from a container carries its labels) is no proof on its own: the seal
// is of the name, and the engine lets only one container bear a name.
func (r *rootFS) seal(name string) string { return sealWith(r.secret, name) }

func sealWith(secret []byte, name string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("agent-control-plane seal v1\x00"))
	m.Write([]byte(name))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// mkdir makes directory rel, mode 0700 whatever the umask. It fails if
// anything already has that name.
func (r *rootFS) mkdir(rel string) error { return r.Mkdir(rel, 0o700) }

// createFile writes a new file rel (mode 0600, which it has before any
// content), failing if anything already has that name. Not fsynced.
func (r *rootFS) createFile(rel string, data []byte) error { return r.CreateFile(rel, data, 0o600) }

// writeAtomic replaces file name in directory dir (relative; "" is the
// root) so that a reader, or the daemon after a crash of its own process
// at any point, sees the old content or the new, never a mix: a temporary
// file made with mode 0600, written, renamed over the name. sync says what
// survives a power loss (securefs.Sync); without one, a power loss may
// lose the write (and after one every child is gone anyway: the boot id
// changes).
func (r *rootFS) writeAtomic(dir, name string, data []byte, sync securefs.Sync) error {
	return r.writeAtomicFunc(dir, name, sync, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomicFunc is writeAtomic with the content written by fill.
func (r *rootFS) writeAtomicFunc(dir, name string, sync securefs.Sync, fill func(io.Writer) error) error {
	return r.WriteAtomic(dir, name, r.tempFileName(name), 0o600, sync, fill)
}

// Staging and trash directories are entries of the root named
// .<kind>-<nonce>-<tag>, where tag is an HMAC of kind and nonce keyed by
// the root's id: a name no person or program makes by accident, so that
// the daemon can prove, from the name alone, that it made the directory.
const (
	kindNew   = "new"   // a sandbox directory being built; renamed to <id> when complete
	kindTrash = "trash" // a sandbox directory being deleted
)

func (r *rootFS) tag(kind, n string) string {
	m := hmac.New(sha256.New, []byte(r.id))
	m.Write([]byte(kind + "\x00" + n))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// tempName returns a fresh staging or trash name.
func (r *rootFS) tempName(kind string) string {
	n := nonce()
	return "." + kind + "-" + n + "-" + r.tag(kind, n)
}

// kindTmp tags the temporary files of writeAtomic: .<name>.tmp-<nonce>-<tag>.
const kindTmp = "tmp"

// tempFileName returns a fresh temporary name for a file to be renamed
// to name: one that a crash may leave behind, and that the next start can
// prove is the daemon's.
func (r *rootFS) tempFileName(name string) string {
	n := nonce()
	return "." + name + ".tmp-" + n + "-" + r.tag(kindTmp, n)
}

// ownTempFile reports whether name is a temporary file name this root
// made (tempFileName).
func (r *rootFS) ownTempFile(name string) bool {
	i := strings.LastIndex(name, ".tmp-")
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	n, tag, ok := strings.Cut(name[i+len(".tmp-"):], "-")
	return ok && hmac.Equal([]byte(tag), []byte(r.tag(kindTmp, n)))
}

// removeTempFiles removes, in directory dir of the root, the temporary
// files an interrupted write left (a rotation or a record write cut by a
// crash). Only regular files whose names prove them the daemon's go.
func (r *rootFS) removeTempFiles(dir string) {
	d, err := r.OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		var st unix.Stat_t
		if !r.ownTempFile(n) || unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		_ = unix.Unlinkat(int(d.Fd()), n, 0)
	}
}

// ownTemp reports whether name is a staging or trash name this root made.
func (r *rootFS) ownTemp(name string) bool {
	for _, kind := range []string{kindNew, kindTrash} {
		rest, ok := strings.CutPrefix(name, "."+kind+"-")
		if !ok {
			continue
		}
		n, tag, ok := strings.Cut(rest, "-")
		return ok && hmac.Equal([]byte(tag), []byte(r.tag(kind, n)))
	}
	return false
}

// removeAll removes name, an entry of the root that the caller has proved
// is the daemon's, so that it disappears at once: it is renamed to a trash
// name first, then removed. Links inside are removed, never followed.
func (r *rootFS) removeAll(name string) error {
	if strings.Contains(name, "/") || name == "" || name == "." || name == ".." {
		return fmt.Errorf("remove %q: not an entry of the root", name)
	}
	trash := name
	if !r.ownTemp(name) {
		trash = r.tempName(kindTrash)
		if err := r.RenameNoReplace(name, trash); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		_ = r.Sync()
	}
	return r.Remove(trash, true)
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RootSeal returns the seal of the root at path, read from its mark
// without changing anything, for tools and tests that check what the
// daemon labelled. It fails for a root that has no secret yet.
func RootSeal(path string) (func(name string) string, error) {
	b, err := os.ReadFile(filepath.Join(path, MarkFile))
	if err != nil {
		return nil, err
	}
	var m rootMark
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", MarkFile, err)
	}
	secret, err := hex.DecodeString(m.Secret)
	if err != nil || len(secret) < 16 {
		return nil, fmt.Errorf("%s: no secret", MarkFile)
	}
	return func(name string) string { return sealWith(secret, name) }, nil
}
