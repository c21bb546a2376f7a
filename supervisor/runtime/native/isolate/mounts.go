package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// SystemDirs are the host's directories a sandbox sees, read-only, so
// that ordinary programs (sh, python3, node, git) run; a link among them
// (a merged /usr) is made again as the same link.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// devices are the host's device nodes a sandbox's /dev holds.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot makes the sandbox's root on a tmpfs at the control
// directory's mount point and pivots into it. The mount namespace is the
// init's own: nothing here is seen by the host.
func buildRoot(cfg Config) error {
	root := filepath.Join(cfg.Control, rootName)
	steps := []struct {
		what string
		do   func() error
	}{
		{"make the mounts private", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"mount the root", func() error {
			return unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m")
		}},
		{"bind the system directories", func() error { return bindSystem(root) }},
		{"mount /tmp", func() error { return mountAt(root, "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777") }},
		{"make /dev", func() error { return makeDev(root) }},
		{"mount /proc", func() error {
			return mountAt(root, "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		}},
		{"make the home directory", func() error { return makeHome(root, cfg) }},
		{"bind the workspace", func() error { return bind(cfg.Workspace, root, cfg.Workspace, false) }},
		{"bind the snapshot's mounts", func() error {
			for _, b := range cfg.Binds {
				if err := bind(b.Source, root, b.Target, b.ReadOnly); err != nil {
					return fmt.Errorf("%s: %w", b.Target, err)
				}
			}
			return nil
		}},
		{"pivot into the root", func() error { return pivot(root) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// mountAt mounts a fresh filesystem at path inside root.
func mountAt(root, path, fstype string, flags uintptr, data string) error {
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return unix.Mount(fstype, dst, fstype, flags, data)
}

func bindSystem(root string) error {
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := bind(d, root, d, true); err != nil {
				return fmt.Errorf("%s: %w", d, err)
			}
		}
	}
	return nil
}

// makeDev makes a minimal /dev: a few host devices, a devpts of the
// sandbox's own (its terminals), /dev/shm and the usual links.
func makeDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := mountAt(root, "/dev", "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range devices {
		dst := filepath.Join(dev, d)
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
	}
	if err := mountAt(root, "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("/dev/pts: %w", err)
	}
	if err := mountAt(root, "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// makeHome gives the home directory an empty private directory when it
// is not the workspace's or inside it.
func makeHome(root string, cfg Config) error {
	if cfg.Home == "" || !filepath.IsAbs(cfg.Home) || within(cfg.Home, cfg.Workspace) {
		return nil
	}
	for _, d := range SystemDirs {
		if within(cfg.Home, d) {
			return nil
		}
	}
	return mountAt(root, cfg.Home, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700")
}

func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// bind mounts src at path inside root, read-only when ro (recursively, in
// one step where the kernel has mount_setattr).
func bind(src, root, path string, ro bool) error {
	dst := filepath.Join(root, path)
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else {
		err = os.MkdirAll(filepath.Dir(dst), 0o755)
		if err == nil {
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return err
	}
	if !ro {
		return unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err == nil {
		defer unix.Close(fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("mount_setattr: %w", err)
		}
		return unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
	}
	if !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("open_tree: %w", err)
	}
	// Before Linux 5.12: bind, then remount read-only keeping the flags
	// the kernel locked (a mount of a more privileged namespace).
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	return unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, "")
}

// pivot makes root the root, drops the host's, and makes the root's own
// tmpfs read-only.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// runc's way: the old root is stacked under the new one and
	// detached, with no directory for it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}
