// Package workspace is runtime.Files over a sandbox's workspace directory
// on this machine, for the runtimes whose workload sees that directory
// (native: where it is; docker: bind-mounted). Every name is resolved
// beneath the workspace by package securefs: no "..", no link followed,
// nothing outside reached.
package workspace

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
)

// MaxList bounds the entries one List returns.
const MaxList = 10000

// MaxPath bounds a name (the kernel's PATH_MAX).
const MaxPath = 4096

// clip is at most 200 bytes of a name, for a message.
func clip(name string) string {
	if len(name) <= 200 {
		return name
	}
	return strings.ToValidUTF8(name[:200], "") + "…"
}

// Files serves runtime.Files for one workspace.
type Files struct {
	// Host is the workspace's path on this machine.
	Host string
	// Seen is the workspace's path as the workload sees it (Host for a
	// native sandbox, the mount point in a container): absolute names
	// must lie beneath it.
	Seen string
}

var _ runtime.Files = Files{}

// WorkDir is the workspace as the workload sees it.
func (w Files) WorkDir() string { return w.Seen }

// rel maps a name as the workload sees it to a path beneath the
// workspace, or an error wrapping runtime.ErrOutside.
func (w Files) rel(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty path", fs.ErrInvalid)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: path has a NUL byte", fs.ErrInvalid)
	}
	if len(name) > MaxPath {
		return "", fmt.Errorf("%w: a path of %d bytes; at most %d", fs.ErrInvalid, len(name), MaxPath)
	}
	p := name
	if path.IsAbs(p) {
		seen := path.Clean(w.Seen)
		clean := path.Clean(p)
		if clean != seen && !strings.HasPrefix(clean, seen+"/") {
			return "", fmt.Errorf("%w: %s is not beneath the workspace %s", runtime.ErrOutside, clip(name), seen)
		}
		p = strings.TrimPrefix(strings.TrimPrefix(clean, seen), "/")
	}
	// Lexically, ".." may not climb above the workspace (a link that
	// would is refused where it is met).
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: %s climbs out of the workspace", runtime.ErrOutside, clip(name))
	}
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// open opens the workspace; each call holds it only for its own use. A
// workspace replaced by a link is refused, not followed.
func (w Files) open(name string) (*securefs.Dir, string, error) {
	rel, err := w.rel(name)
	if err != nil {
		return nil, "", err
	}
	d, err := securefs.OpenOwn(w.Host)
	return d, rel, outside(err)
}

// outside turns securefs's refusal of a link into runtime.ErrOutside,
// and cuts a long name in the message.
func outside(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && len(pe.Path) > 200 {
		pe.Path = clip(pe.Path)
	}
	if errors.Is(err, securefs.ErrNotOwnFile) && !errors.Is(err, runtime.ErrOutside) {
		return fmt.Errorf("%w: %w", runtime.ErrOutside, err)
	}
	return err
}

func info(d *securefs.Dir, rel string, fi fs.FileInfo) runtime.FileInfo {
	out := runtime.FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
	if rel == "" {
		out.Name = "."
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		out.Link, _ = d.Readlink(rel)
	}
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		out.Dev, out.Ino = st.Dev, st.Ino
	}
	return out
}

// Stat describes name; a link is described, not followed.
func (w Files) Stat(_ context.Context, name string) (runtime.FileInfo, error) {
	d, rel, err := w.open(name)
	if err != nil {
		return runtime.FileInfo{}, err
	}
	defer d.Close()
	fi, err := d.Lstat(rel)
	if err != nil {
		return runtime.FileInfo{}, outside(err)
	}
	return info(d, rel, fi), nil
}

// List describes directory name's entries, at most MaxList.
func (w Files) List(_ context.Context, name string) ([]runtime.FileInfo, error) {
	d, rel, err := w.open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fis, err := d.ReadDir(rel, MaxList)
	if err != nil {
		return nil, outside(err)
	}
	out := make([]runtime.FileInfo, len(fis))
	for i, fi := range fis {
		out[i] = info(d, path.Join(rel, fi.Name()), fi)
	}
	return out, nil
}

// Open opens regular file name for reading.
func (w Files) Open(_ context.Context, name string) (io.ReadCloser, runtime.FileInfo, error) {
	d, rel, err := w.open(name)
	if err != nil {
		return nil, runtime.FileInfo{}, err
	}
	defer d.Close()
	f, fi, err := d.OpenRegular(rel, unix.O_RDONLY)
	if err != nil {
		return nil, runtime.FileInfo{}, outside(err)
	}
	return f, info(d, rel, fi), nil
}

// Write replaces file name atomically: a temporary file beside it,
// renamed over it.
func (w Files) Write(_ context.Context, name string, r io.Reader, perm fs.FileMode) (int64, error) {
	d, rel, err := w.open(name)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	if rel == "" {
		return 0, fmt.Errorf("%w: the workspace itself is a directory", fs.ErrInvalid)
	}
	dir, base := path.Split(rel)
	if fi, err := d.Lstat(rel); err == nil {
		if !fi.Mode().IsRegular() {
			return 0, outside(&fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("%w: is not a regular file", securefs.ErrNotOwnFile)})
		}
		perm = fi.Mode().Perm() // a replaced file keeps its mode
	}
	var n int64
	err = d.WriteAtomic(strings.TrimSuffix(dir, "/"), base, "."+base+".upload-"+rand.Text(), perm, securefs.NoSync, func(f io.Writer) error {
		var err error
		n, err = io.Copy(f, r)
		return err
	})
	return n, outside(err)
}

// MaxLinks bounds the links one name may pass through (the kernel's own
// bound, past which it answers ELOOP).
const MaxLinks = 40

// Resolve is name with every link on its way followed beneath the
// workspace: a relative target from the link's directory, an absolute
// one from the workspace as the workload sees it. A target that would
// climb out of the workspace, or name a place outside it, is refused
// (runtime.ErrOutside); nothing outside is ever looked at. A part that
// does not exist is kept as named (a dangling link resolves to its
// target).
func (w Files) Resolve(_ context.Context, name string) (string, error) {
	d, rel, err := w.open(name)
	if err != nil {
		return "", err
	}
	defer d.Close()
	out, err := w.resolve(d, rel)
	if err != nil {
		return "", err
	}
	return path.Join(w.Seen, out), nil
}

func (w Files) resolve(d *securefs.Dir, rel string) (string, error) {
	var done []string // resolved: real directories, then the rest as named
	todo := strings.Split(rel, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("%w: a link on the way to it climbs out of the workspace", runtime.ErrOutside)
			}
			done = done[:len(done)-1]
			continue
		}
		cur := path.Join(append(done, c)...)
		fi, err := d.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			done = append(done, c)
			continue
		case errors.Is(err, unix.ENOTDIR):
			return "", fmt.Errorf("%w: %s is not a directory", fs.ErrInvalid, clip(path.Join(done...)))
		case err != nil:
			return "", outside(err)
		case fi.Mode()&fs.ModeSymlink == 0:
			done = append(done, c)
			continue
		}
		if links++; links > MaxLinks {
			return "", fmt.Errorf("%w: more than %d links on the way to it", fs.ErrInvalid, MaxLinks)
		}
		target, err := d.Readlink(cur)
		if err != nil {
			return "", outside(err)
		}
		if path.IsAbs(target) {
			seen, t := path.Clean(w.Seen), path.Clean(target)
			if t != seen && !strings.HasPrefix(t, seen+"/") {
				return "", fmt.Errorf("%w: the link %s leads to %s, outside the workspace", runtime.ErrOutside, clip(cur), clip(target))
			}
			done, target = nil, strings.TrimPrefix(t, seen)
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return path.Join(done...), nil
}

// Mkdir makes directory name and its missing parents.
func (w Files) Mkdir(_ context.Context, name string, perm fs.FileMode) error {
	d, rel, err := w.open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return outside(d.MkdirAll(rel, perm))
}

// Remove removes name (a directory only when empty, or with recursive).
func (w Files) Remove(_ context.Context, name string, recursive bool) error {
	d, rel, err := w.open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if rel == "" {
		return fmt.Errorf("%w: the workspace itself cannot be removed", runtime.ErrOutside)
	}
	return outside(d.Remove(rel, recursive))
}

// Rename moves from to to, both in the workspace.
func (w Files) Rename(_ context.Context, from, to string) error {
	d, rel, err := w.open(from)
	if err != nil {
		return err
	}
	defer d.Close()
	relTo, err := w.rel(to)
	if err != nil {
		return err
	}
	if rel == "" || relTo == "" {
		return fmt.Errorf("%w: the workspace itself cannot be moved or replaced", runtime.ErrOutside)
	}
	return outside(d.Rename(rel, relTo))
}

// Symlink makes name a link to target, as written: the workload may
// follow it anywhere it could go itself; the file API never follows one
// out of the workspace.
func (w Files) Symlink(_ context.Context, target, name string) error {
	d, rel, err := w.open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if rel == "" {
		return fmt.Errorf("%w: the workspace itself cannot be replaced", runtime.ErrOutside)
	}
	return outside(d.Symlink(target, rel))
}

// Chmod sets name's permission bits: a regular file or a directory
// beneath the workspace, not the workspace itself.
func (w Files) Chmod(_ context.Context, name string, perm fs.FileMode) error {
	d, rel, err := w.open(name)
	if err != nil {
		return err
	}
	defer d.Close()
	if rel == "" {
		return fmt.Errorf("%w: the workspace's own mode is the daemon's", runtime.ErrOutside)
	}
	return outside(d.Chmod(rel, perm))
}
