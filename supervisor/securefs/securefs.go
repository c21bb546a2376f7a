// Package securefs is the daemon's way into a directory tree it must not
// be led out of: its own root, a sandbox's workspace. A Dir is a
// directory held open; every path given to it is relative, clean, and
// resolved beneath it without following any symbolic link (openat2 with
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS where the kernel has it,
// otherwise a walk of O_NOFOLLOW opens, component by component), so that
// a link planted where a file should be is refused, never followed. Files
// are opened non-blocking and read only when regular: a FIFO or a device
// planted there can neither block a reader nor be read.
//
// This file is long because every no-follow operation beneath the root
// shares the openat2 and fallback plumbing declared here.
package securefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is a directory held open. Its methods are safe for concurrent use.
type Dir struct {
	path string   // absolute, for messages and tools
	f    *os.File // held open for the Dir's life
}

// Open opens the directory at path. The path itself may be reached
// through a link (it is the caller's choice); nothing beneath it is.
func Open(path string) (*Dir, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &Dir{path: path, f: f}, nil
}

// OpenOwn opens the directory at path, which must itself be a
// directory, not a link to one (the components above it may be links).
func OpenOwn(path string) (*Dir, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: notOwn("is a link or not a directory; not followed")}
		}
		return nil, err
	}
	return &Dir{path: path, f: f}, nil
}

// Path is the directory's path as it was opened.
func (d *Dir) Path() string { return d.path }

// Abs returns the absolute path of rel.
func (d *Dir) Abs(rel string) string { return filepath.Join(d.path, rel) }

// Close releases the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Sync flushes the directory's entries.
func (d *Dir) Sync() error { return d.f.Sync() }

// Names lists the directory's own entries.
func (d *Dir) Names() ([]string, error) {
	f, err := d.OpenFile("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// useOpenat2 is cleared the first time the kernel says it has no openat2
// (before Linux 5.6, or a seccomp filter that refuses it).
var useOpenat2 atomic.Bool

func init() { useOpenat2.Store(true) }

// OpenFile opens rel beneath the directory without following any link.
func (d *Dir) OpenFile(rel string, flags int, perm uint32) (*os.File, error) {
	comps, err := Split(rel)
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
		fd, err := unix.Openat2(int(d.f.Fd()), strings.Join(comps, "/"), &how)
		if err == nil {
			return os.NewFile(uintptr(fd), d.Abs(rel)), nil
		}
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return nil, d.linkErr(rel, err)
		}
		useOpenat2.Store(false)
	}
	return d.openWalk(rel, comps, flags, perm)
}

// openWalk is OpenFile for kernels without openat2: each directory on the
// way is opened with O_NOFOLLOW. Relative paths never hold "..", so the
// walk cannot leave the directory.
func (d *Dir) openWalk(rel string, comps []string, flags int, perm uint32) (*os.File, error) {
	root := int(d.f.Fd())
	cur := root
	for _, c := range comps[:len(comps)-1] {
		fd, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != root {
			unix.Close(cur)
		}
		if err != nil {
			return nil, pathErr("open", rel, err)
		}
		cur = fd
	}
	fd, err := unix.Openat(cur, comps[len(comps)-1], flags, perm)
	if cur != root {
		unix.Close(cur)
	}
	if err != nil {
		return nil, d.linkErr(rel, err)
	}
	return os.NewFile(uintptr(fd), d.Abs(rel)), nil
}

// Split returns the components of rel, a clean relative path ("" and "."
// are the directory itself), or an error for any other path.
func Split(rel string) ([]string, error) {
	if rel == "" || rel == "." {
		return nil, nil
	}
	if filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%s: not relative to the directory", rel)
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%s: not a clean path beneath the directory", rel)
		}
	}
	return comps, nil
}

// pathErr names what went wrong in words a person reads: a link, or a
// path that leads out.
func pathErr(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return &fs.PathError{Op: op, Path: rel, Err: notOwn("is a symbolic link or leads out of the directory; not followed")}
	}
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

// linkErr is pathErr, also for a link opened as a directory: the kernel
// says "not a directory" of a link with O_DIRECTORY|O_NOFOLLOW.
func (d *Dir) linkErr(rel string, err error) error {
	if errors.Is(err, unix.ENOTDIR) {
		if fi, lerr := d.Lstat(rel); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			err = unix.ELOOP
		}
	}
	return pathErr("open", rel, err)
}

type notOwn string

func (e notOwn) Error() string { return string(e) }

// ErrNotOwnFile matches errors for a link, or a file that is not regular,
// found where a regular file or a directory was expected.
var ErrNotOwnFile = errors.New("not a file of the directory's own")

func (e notOwn) Is(target error) bool { return target == ErrNotOwnFile }

// OpenRegular opens rel non-blocking with flags (O_RDONLY, O_RDWR) and
// checks that it is a regular file.
func (d *Dir) OpenRegular(rel string, flags int) (*os.File, os.FileInfo, error) {
	f, err := d.OpenFile(rel, flags|unix.O_NONBLOCK, 0)
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
		return nil, nil, &fs.PathError{Op: "open", Path: rel, Err: notOwn("is not a regular file (" + fi.Mode().Type().String() + "); not read")}
	}
	return f, fi, nil
}

// ReadFile reads regular file rel, of at most limit bytes.
func (d *Dir) ReadFile(rel string, limit int64) ([]byte, error) {
	f, fi, err := d.OpenRegular(rel, unix.O_RDONLY)
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

// parent opens the directory holding rel and returns it with rel's last
// component. rel must name something beneath the directory, not the
// directory itself.
func (d *Dir) parent(rel string) (*os.File, string, error) {
	comps, err := Split(rel)
	if err != nil {
		return nil, "", err
	}
	if len(comps) == 0 {
		return nil, "", &fs.PathError{Op: "open", Path: rel, Err: errors.New("is the directory itself")}
	}
	p, err := d.OpenFile(strings.Join(comps[:len(comps)-1], "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return p, comps[len(comps)-1], err
}

// Mkdir makes directory rel with mode perm whatever the umask. It fails
// if anything already has that name.
func (d *Dir) Mkdir(rel string, perm fs.FileMode) error {
	p, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	return mkdirAt(p, rel, name, perm)
}

func mkdirAt(p *os.File, rel, name string, perm fs.FileMode) error {
	if err := unix.Mkdirat(int(p.Fd()), name, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	fd, err := unix.Openat(int(p.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, uint32(perm.Perm()))
}

// MkdirAll makes directory rel and any parents missing, each new one
// with mode perm; an existing directory on the way is kept, anything else
// there (a link, a file) fails.
func (d *Dir) MkdirAll(rel string, perm fs.FileMode) error {
	comps, err := Split(rel)
	if err != nil {
		return err
	}
	for i := range comps {
		sub := strings.Join(comps[:i+1], "/")
		err := d.Mkdir(sub, perm)
		if errors.Is(err, fs.ErrExist) {
			fi, serr := d.Lstat(sub)
			if serr == nil && fi.IsDir() {
				continue
			}
			return &fs.PathError{Op: "mkdir", Path: sub, Err: notOwn("exists and is not a directory")}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CreateFile writes a new file rel with mode perm (which it has before
// any content), failing if anything already has that name. Not fsynced.
func (d *Dir) CreateFile(rel string, data []byte, perm fs.FileMode) error {
	f, err := d.OpenFile(rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, uint32(perm.Perm()))
	if err != nil {
		return err
	}
	if err := f.Chmod(perm.Perm()); err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync says whether and how WriteAtomic makes a file survive a power
// loss (a crash of the program never loses a written file).
type Sync int

const (
	// NoSync leaves the new content to the kernel's writeback.
	NoSync Sync = iota
	// SyncBeforeRename fsyncs the file before the rename and the
	// directory after it: after a power loss at any point, the name holds
	// the old content or the new.
	SyncBeforeRename
	// SyncAfterRename renames first, then fsyncs the file and the
	// directory: one journal commit instead of two (about 0.4 ms on an
	// ext4 disk). A power loss before it returns may leave the name
	// empty on a file system that does not flush a file renamed over
	// another (ext4 and btrfs do); for a file whose reader takes an
	// empty one as unreadable and leaves it alone.
	SyncAfterRename
)

// WriteAtomic replaces file name in directory dir (relative; "" is this
// one) so that a reader, or the daemon after a crash at any point, sees
// the old content or the new, never a mix: a temporary file called tmp
// made with mode perm, filled by fill, renamed over the name; sync says
// what survives a power loss.
func (d *Dir) WriteAtomic(dir, name, tmp string, perm fs.FileMode, sync Sync, fill func(io.Writer) error) (err error) {
	p, err := d.OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer p.Close()
	dfd := int(p.Fd())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
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
	if err = f.Chmod(perm.Perm()); err != nil {
		return err
	}
	if err = fill(f); err != nil {
		return err
	}
	if sync == SyncBeforeRename {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if sync != SyncAfterRename {
		if err = f.Close(); err != nil {
			return err
		}
	}
	if err = unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return &fs.PathError{Op: "rename", Path: filepath.Join(dir, name), Err: err}
	}
	if sync == SyncAfterRename {
		// The file is renamed: from here an error leaves it in place.
		serr := f.Sync()
		if cerr := f.Close(); serr == nil {
			serr = cerr
		}
		if serr != nil {
			return serr
		}
	}
	if sync != NoSync {
		return p.Sync()
	}
	return nil
}

// RenameNoReplace renames entry old of the directory to new, failing
// with fs.ErrExist if new exists (never replacing it, even an empty
// directory).
func (d *Dir) RenameNoReplace(old, new string) error {
	if strings.Contains(old, "/") || strings.Contains(new, "/") {
		return fmt.Errorf("rename %s to %s: not entries of the directory", old, new)
	}
	dfd := int(d.f.Fd())
	if err := unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return &fs.PathError{Op: "rename", Path: new, Err: fs.ErrExist}
		}
		return &fs.PathError{Op: "rename", Path: new, Err: err}
	}
	return nil
}

// Rename moves from to to, both beneath the directory, replacing what is
// at to (a file, or an empty directory).
func (d *Dir) Rename(from, to string) error {
	fp, fname, err := d.parent(from)
	if err != nil {
		return err
	}
	defer fp.Close()
	tp, tname, err := d.parent(to)
	if err != nil {
		return err
	}
	defer tp.Close()
	if err := unix.Renameat(int(fp.Fd()), fname, int(tp.Fd()), tname); err != nil {
		return &fs.PathError{Op: "rename", Path: from, Err: err}
	}
	return nil
}

// Lstat describes rel; a link is described, not followed.
func (d *Dir) Lstat(rel string) (fs.FileInfo, error) {
	if comps, err := Split(rel); err != nil {
		return nil, err
	} else if len(comps) == 0 {
		return d.f.Stat()
	}
	p, name, err := d.parent(rel)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return lstatAt(p, name)
}

func lstatAt(p *os.File, name string) (fs.FileInfo, error) {
	// os.File.ReadDir's entries are described through fstatat with
	// AT_SYMLINK_NOFOLLOW: one entry is looked up the same way.
	var st unix.Stat_t
	if err := unix.Fstatat(int(p.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return fileInfo(name, &st), nil
}

// ReadDir describes the entries of directory rel, sorted by name, each as
// Lstat would, at most limit of them (0: no limit; more is an error).
func (d *Dir) ReadDir(rel string, limit int) ([]fs.FileInfo, error) {
	f, err := d.OpenFile(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := -1
	if limit > 0 {
		n = limit + 1
	}
	names, err := f.Readdirnames(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if limit > 0 && len(names) > limit {
		return nil, fmt.Errorf("%s: more than %d entries", rel, limit)
	}
	slices.Sort(names)
	out := make([]fs.FileInfo, 0, len(names))
	for _, name := range names {
		fi, err := lstatAt(f, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

// Chmod sets rel's permission bits: a regular file or a directory. A
// link is refused, never followed; so is a device, a FIFO or a socket.
func (d *Dir) Chmod(rel string, perm fs.FileMode) error {
	f, err := d.OpenFile(rel, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
	case unix.S_IFLNK:
		return &fs.PathError{Op: "chmod", Path: rel, Err: notOwn("is a symbolic link; not followed")}
	default:
		return &fs.PathError{Op: "chmod", Path: rel, Err: notOwn("is not a regular file or a directory")}
	}
	// An O_PATH descriptor takes no fchmod; its /proc name does, and it
	// names this very file whatever happens to the path meanwhile.
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	return nil
}

// Remove removes rel: a file or a link (never what it points to), or a
// directory, which must be empty unless recursive. What is inside a
// directory removed recursively is reached beneath it and never through
// a link.
func (d *Dir) Remove(rel string, recursive bool) error {
	p, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	return removeAt(p, rel, name, recursive)
}

func removeAt(p *os.File, rel, name string, recursive bool) error {
	pfd := int(p.Fd())
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return &fs.PathError{Op: "remove", Path: rel, Err: err}
	}
	err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
	if err == nil {
		return nil
	}
	if !recursive || !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return &fs.PathError{Op: "remove", Path: rel, Err: err}
	}
	return removeTree(p, rel, name)
}

// MaxOpenInRemove bounds the directories a recursive removal holds open
// at once, however deep the tree: a deeper one is closed and opened again
// through ".." on the way back up (checked to be the same directory), as
// rm -rf does on a deep tree.
const MaxOpenInRemove = 32

// level is a directory on the way down a removal.
type level struct {
	f        *os.File // nil: closed to keep the bound
	name     string   // in its parent
	dev, ino uint64
}

// removeTree removes directory name of p and everything beneath it,
// depth first, reaching each entry beneath its directory and never
// through a link, with at most MaxOpenInRemove directories open.
//
// It is long because it keeps its own stack of open directories (no
// recursion, a bound on what is open), and each level's reopen and check
// is part of that one walk.
func removeTree(p *os.File, rel, name string) error {
	open := func(dir *os.File, n string) (*level, error) {
		fd, err := unix.Openat(int(dir.Fd()), n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, pathErr("remove", rel, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
		return &level{f: os.NewFile(uintptr(fd), rel), name: n, dev: st.Dev, ino: st.Ino}, nil
	}
	top, err := open(p, name)
	if err != nil {
		return err
	}
	stack := []*level{top}
	defer func() {
		for _, l := range stack {
			if l.f != nil {
				l.f.Close()
			}
		}
	}()
	// stack[low:] are open, stack[:low] closed: closing the lowest open
	// level keeps the bound, and the closed ones are reopened in turn on
	// the way up.
	low := 0
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		if _, err := cur.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		// In rounds of a bounded read, from the start again after each:
		// the entries removed are gone from the next read.
		names, err := cur.f.Readdirnames(256)
		if err != nil && !errors.Is(err, io.EOF) {
			return &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
		var down *level
		for _, n := range names {
			fd := int(cur.f.Fd())
			err := unix.Unlinkat(fd, n, 0)
			if err == nil || errors.Is(err, unix.ENOENT) {
				continue
			}
			if errors.Is(err, unix.EISDIR) {
				if err = unix.Unlinkat(fd, n, unix.AT_REMOVEDIR); err == nil || errors.Is(err, unix.ENOENT) {
					continue
				}
				if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
					if down, err = open(cur.f, n); err != nil {
						return err
					}
					break
				}
			}
			return &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
		if down != nil {
			stack = append(stack, down)
			if len(stack)-low > MaxOpenInRemove {
				stack[low].f.Close()
				stack[low].f = nil
				low++
			}
			continue
		}
		if len(names) > 0 {
			continue // a round removed: read again
		}
		// cur is empty: remove it from its parent, opened again through
		// ".." if it was closed on the way down.
		stack = stack[:len(stack)-1]
		var parent *os.File = p
		if len(stack) > 0 {
			up := stack[len(stack)-1]
			if up.f == nil {
				l, err := open(cur.f, "..")
				if err != nil {
					return err
				}
				if l.dev != up.dev || l.ino != up.ino {
					l.f.Close()
					return &fs.PathError{Op: "remove", Path: rel, Err: errors.New("the tree was moved while it was being removed")}
				}
				up.f = l.f
				low = len(stack) - 1
			}
			parent = up.f
		}
		cur.f.Close()
		if err := unix.Unlinkat(int(parent.Fd()), cur.name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "remove", Path: rel, Err: err}
		}
	}
	return nil
}

// fileInfo is a fs.FileInfo of a stat.
func fileInfo(name string, st *unix.Stat_t) fs.FileInfo {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return statInfo{name: name, mode: mode, size: st.Size, mtime: time.Unix(st.Mtim.Unix()), sys: st}
}

type statInfo struct {
	name  string
	mode  fs.FileMode
	size  int64
	mtime time.Time
	sys   *unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.size }
func (s statInfo) Mode() fs.FileMode  { return s.mode }
func (s statInfo) ModTime() time.Time { return s.mtime }
func (s statInfo) IsDir() bool        { return s.mode.IsDir() }
func (s statInfo) Sys() any           { return s.sys }

// Symlink makes rel a symbolic link to target, as written; nothing is
// followed, and what the link names is never reached through it here.
func (d *Dir) Symlink(target, rel string) error {
	p, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := unix.Symlinkat(target, int(p.Fd()), name); err != nil {
		return &fs.PathError{Op: "symlink", Path: rel, Err: err}
	}
	return nil
}

// Readlink returns the target of link rel, as written; nothing is
// followed.
func (d *Dir) Readlink(rel string) (string, error) {
	p, name, err := d.parent(rel)
	if err != nil {
		return "", err
	}
	defer p.Close()
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(int(p.Fd()), name, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: rel, Err: err}
	}
	return string(buf[:n]), nil
}
