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
	"sync/atomic"
	"time"

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
	// SessionsFile keeps the dashboard's browser sessions (package
	// api/session decides what is in it; the supervisor reads and writes
	// it for it: LoadSessions, SaveSessions).
	SessionsFile = ".dashboard-sessions.json"
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
	path   string   // absolute
	dir    *os.File // the root, open for the daemon's life
	id     string   // the mark's rootId: proof of ownership
	secret []byte   // the mark's secret: keys seals
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
	d, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root: %w", err)
	}
	r := &rootFS{path: path, dir: d}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if created {
		if err := d.Chmod(0o700); err != nil {
			return nil, fmt.Errorf("create root: %w", err)
		}
	}
	b, err := r.readFile(MarkFile, 4096)
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
			if err := r.writeAtomic("", MarkFile, append(b, '\n'), true); err != nil {
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
	names, err := d.Readdirnames(-1)
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
	if err := r.writeAtomic("", MarkFile, append(m, '\n'), true); err != nil {
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

func (r *rootFS) close() error { return r.dir.Close() }

// abs returns the absolute path of rel.
func (r *rootFS) abs(rel string) string { return filepath.Join(r.path, rel) }

// useOpenat2 is cleared the first time the kernel says it has no openat2
// (before Linux 5.6, or a seccomp filter that refuses it).
var useOpenat2 atomic.Bool

func init() { useOpenat2.Store(true) }

// open opens rel beneath the root without following any link.
func (r *rootFS) open(rel string, flags int, perm uint32) (*os.File, error) {
	comps, err := splitRel(rel)
	if err != nil {
		return nil, err
	}
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if len(comps) == 0 {
		comps = []string{"."}
	}
	if useOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
		if flags&unix.O_CREAT != 0 {
			how.Mode = uint64(perm)
		}
		fd, err := unix.Openat2(int(r.dir.Fd()), strings.Join(comps, "/"), &how)
		if err == nil {
			return os.NewFile(uintptr(fd), r.abs(rel)), nil
		}
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return nil, pathErr("open", rel, err)
		}
		useOpenat2.Store(false)
	}
	return r.openWalk(rel, comps, flags, perm)
}

// openWalk is open for kernels without openat2: each directory on the way
// is opened with O_NOFOLLOW. Relative paths never hold "..", so the walk
// cannot leave the root.
func (r *rootFS) openWalk(rel string, comps []string, flags int, perm uint32) (*os.File, error) {
	cur := int(r.dir.Fd())
	for _, c := range comps[:len(comps)-1] {
		fd, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != int(r.dir.Fd()) {
			unix.Close(cur)
		}
		if err != nil {
			return nil, pathErr("open", rel, err)
		}
		cur = fd
	}
	fd, err := unix.Openat(cur, comps[len(comps)-1], flags, perm)
	if cur != int(r.dir.Fd()) {
		unix.Close(cur)
	}
	if err != nil {
		return nil, pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), r.abs(rel)), nil
}

func splitRel(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	if filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%s: not relative to the root", rel)
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%s: not a clean path beneath the root", rel)
		}
	}
	return comps, nil
}

// pathErr names what went wrong in words a person reads: a link or a
// non-regular file planted where the daemon's own file should be.
func pathErr(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return &fs.PathError{Op: op, Path: rel, Err: errNotOwnFile("is a symbolic link or leads out of the root; not followed")}
	}
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

type errNotOwnFile string

func (e errNotOwnFile) Error() string { return string(e) }

// ErrNotOwnFile matches errors for a link or a non-regular file found where
// the daemon's own file should be.
var ErrNotOwnFile = errors.New("not the daemon's own file")

func (e errNotOwnFile) Is(target error) bool { return target == ErrNotOwnFile }

// openRegular opens rel for reading, non-blocking, and checks that it is a
// regular file.
func (r *rootFS) openRegular(rel string) (*os.File, os.FileInfo, error) {
	return r.openRegularFlags(rel, unix.O_RDONLY)
}

// openRegularFlags is openRegular with other access flags (O_RDWR).
func (r *rootFS) openRegularFlags(rel string, flags int) (*os.File, os.FileInfo, error) {
	f, err := r.open(rel, flags|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &fs.PathError{Op: "open", Path: rel, Err: errNotOwnFile("is not a regular file (" + fi.Mode().Type().String() + "); not read")}
	}
	return f, fi, nil
}

// readFile reads a regular file of at most limit bytes.
func (r *rootFS) readFile(rel string, limit int64) ([]byte, error) {
	f, fi, err := r.openRegular(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", rel, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s: more than the %d bytes allowed", rel, limit)
	}
	return b, err
}

// mkdir makes directory rel, mode 0700 whatever the umask. It fails if
// anything already has that name.
func (r *rootFS) mkdir(rel string) error {
	parent, name := filepath.Split(rel)
	d, err := r.open(strings.TrimSuffix(parent, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mkdirat(int(d.Fd()), name, 0o700); err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, 0o700)
}

// createFile writes a new file rel (mode 0600, which it has before any
// content), failing if anything already has that name. Not fsynced.
func (r *rootFS) createFile(rel string, data []byte) error {
	f, err := r.open(rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeAtomic replaces file name in directory dir (relative; "" is the
// root) so that a reader, or the daemon after a crash of its own process
// at any point, sees the old content or the new, never a mix: a temporary
// file made with mode 0600, written, renamed over the name. With durable,
// the file is fsynced before the rename and the directory after it, so the
// new content survives a power loss too; without, a power loss may lose
// the write (and after one every child is gone anyway: the boot id
// changes).
func (r *rootFS) writeAtomic(dir, name string, data []byte, durable bool) error {
	return r.writeAtomicFunc(dir, name, durable, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomicFunc is writeAtomic with the content written by fill.
func (r *rootFS) writeAtomicFunc(dir, name string, durable bool, fill func(io.Writer) error) (err error) {
	d, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	dfd := int(d.Fd())
	tmp := r.tempFileName(name)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "create", Path: filepath.Join(dir, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if err != nil {
			f.Close()
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if err = fill(f); err != nil {
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
	if err = unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return &fs.PathError{Op: "rename", Path: filepath.Join(dir, name), Err: err}
	}
	if durable {
		return d.Sync()
	}
	return nil
}

// renameNoReplace renames entry old of the root to new, failing with
// fs.ErrExist if new exists (never replacing it, even an empty directory).
func (r *rootFS) renameNoReplace(old, new string) error {
	if strings.Contains(old, "/") || strings.Contains(new, "/") {
		return fmt.Errorf("rename %s to %s: not entries of the root", old, new)
	}
	dfd := int(r.dir.Fd())
	if err := unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrExist}
		}
		return &fs.PathError{Op: "rename", Path: new, Err: err}
	}
	return nil
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
	d, err := r.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
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
		if err := r.renameNoReplace(name, trash); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		_ = r.dir.Sync()
	}
	return os.RemoveAll(r.abs(trash))
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
