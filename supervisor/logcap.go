package supervisor

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RotatedSuffix names a log's one rotated file: stdout.log.1.
const RotatedSuffix = ".1"

// logCap keeps each live sandbox's stdout.log and stderr.log within a cap
// while the child writes to them, without the child's cooperation: the
// child keeps appending to its own file descriptor (O_APPEND), and the
// daemon moves the older part of the file aside.
//
// What it guarantees:
//   - Event-driven: inotify reports every write (IN_MODIFY), so a file is
//     rotated as soon as it reaches half the cap, however fast the child
//     writes; on disk each stream holds at most about max bytes (the live
//     file and one rotated file of about max/2 each), plus what the child
//     writes during one rotation.
//   - Never blocks the child: it never holds the child's descriptor or
//     anything the child waits on.
//   - Never loses the newest output: the older part is copied to
//     <log>.1 (replacing the one before), then cut from the head of the
//     live file with fallocate(FALLOC_FL_COLLAPSE_RANGE), which the kernel
//     serializes with the child's appends. Where the file system cannot
//     collapse (tmpfs, some others), the file is emptied with ftruncate
//     after the copy has caught up with the child; the bytes written in
//     the instant between the last copy and the truncation can then be
//     lost (as with logrotate's copytruncate). The cut happens even when
//     the copy fails (a full disk): the cap holds, the older part is lost,
//     and that is logged.
//   - Only the daemon's own files are touched (rootFS).
type logCap struct {
	fs  *rootFS
	max int64
	log *slog.Logger
	ino *os.File // the inotify descriptor, in the runtime's poller
	fd  int      // the same descriptor, for inotify_add_watch (ino.Fd would make it blocking)

	mu      sync.Mutex
	byWatch map[int32]string // watch descriptor → log (relative to the root)
	byLog   map[string]int32
	warned  map[string]time.Time // rotation failures, logged once a minute

	done chan struct{}
}

// canCollapse is cleared once the file system refuses
// FALLOC_FL_COLLAPSE_RANGE; then rotation truncates.
var canCollapse atomic.Bool

func init() { canCollapse.Store(true) }

// newLogCap starts the rotator.
func newLogCap(r *rootFS, max int64, log *slog.Logger) (*logCap, error) {
	lc := &logCap{fs: r, max: max, log: log, byWatch: map[int32]string{}, byLog: map[string]int32{},
		warned: map[string]time.Time{}, done: make(chan struct{})}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	lc.ino, lc.fd = os.NewFile(uintptr(fd), "inotify"), fd
	go lc.run()
	return lc, nil
}

// close stops the rotator and waits for it.
func (lc *logCap) close() {
	lc.ino.Close()
	<-lc.done
}

// watch starts capping sandbox id's logs, and rotates them at once if
// they are over (a re-adopted child wrote while no daemon was watching).
func (lc *logCap) watch(id string) {
	for _, name := range []string{StdoutFile, StderrFile} {
		rel := id + "/" + name
		wd, err := unix.InotifyAddWatch(lc.fd, lc.fs.abs(rel), unix.IN_MODIFY|unix.IN_DONT_FOLLOW)
		if err != nil {
			lc.log.Warn("watch log for its cap", "sandbox", id, "log", name, "err", err)
			continue
		}
		lc.mu.Lock()
		lc.byWatch[int32(wd)], lc.byLog[rel] = rel, int32(wd)
		lc.mu.Unlock()
		lc.rotate(rel)
	}
}

// release stops capping sandbox id's logs, after a last rotation: its
// workload is gone and writes no more.
func (lc *logCap) release(id string) {
	for _, name := range []string{StdoutFile, StderrFile} {
		rel := id + "/" + name
		lc.mu.Lock()
		wd, ok := lc.byLog[rel]
		delete(lc.byLog, rel)
		delete(lc.byWatch, wd)
		delete(lc.warned, rel)
		lc.mu.Unlock()
		if ok {
			_, _ = unix.InotifyRmWatch(lc.fd, uint32(wd))
			lc.rotate(rel)
		}
	}
}

// run reads inotify events until close, and rotates each log written to.
func (lc *logCap) run() {
	defer close(lc.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := lc.ino.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				lc.log.Error("log cap: reading inotify events failed; logs are no longer capped", "err", err)
			}
			return
		}
		seen := map[string]bool{}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			lc.mu.Lock()
			rel, ok := lc.byWatch[ev.Wd]
			if ev.Mask&unix.IN_IGNORED != 0 && ok {
				// The file is gone (the sandbox was deleted).
				delete(lc.byWatch, ev.Wd)
				delete(lc.byLog, rel)
				ok = false
			}
			lc.mu.Unlock()
			if ok && !seen[rel] {
				seen[rel] = true
				lc.rotate(rel)
			}
		}
	}
}

// rotate moves the older part of log rel to rel.1 when rel has reached
// half the cap.
func (lc *logCap) rotate(rel string) {
	f, fi, err := lc.fs.openRegularFlags(rel, unix.O_RDWR)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			lc.warn(rel, "rotate log: cannot open it", err)
		}
		return
	}
	defer f.Close()
	if fi.Size() < lc.max/2 {
		return
	}
	collapse := canCollapse.Load()
	cut, err := lc.keepOlder(f, rel, fi.Size(), collapse)
	if err != nil {
		lc.warn(rel, "rotate log: the older part could not be kept and is dropped to hold the cap", err)
	}
	if cut <= 0 {
		return
	}
	if collapse {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, cut)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			lc.warn(rel, "rotate log: collapse failed", err)
			return
		}
		// This file system cannot collapse: from now on, truncate. The
		// older part is copied again, up to the end.
		canCollapse.Store(false)
		if cut, err = lc.keepOlder(f, rel, fi.Size(), false); err != nil {
			lc.warn(rel, "rotate log: the older part could not be kept and is dropped to hold the cap", err)
		}
	}
	if err := f.Truncate(0); err != nil {
		lc.warn(rel, "rotate log: truncate failed", err)
	}
}

// keepOlder copies the newest max/2 bytes of the head of f to rel.1
// (atomically replacing it; anything older is dropped) and returns how many
// bytes of the head may now be cut. With collapse, the head is size
// rounded down to the file system's block size (collapse works in whole
// blocks, and never up to the end); without, the copy goes on, a few
// rounds at most, until it has caught up with the child, and everything up
// to where it got may be cut.
func (lc *logCap) keepOlder(f *os.File, rel string, size int64, collapse bool) (int64, error) {
	cut := size
	if collapse {
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Bsize <= 0 {
			return 0, err
		}
		bs := st.Bsize
		cut = (size - 1) / bs * bs
		if cut <= 0 {
			return 0, nil
		}
	}
	// The rotated file holds at most max/2 bytes. Without collapse, a
	// quarter of that is kept free for what the child writes during the
	// copy.
	keep := lc.max / 2
	if !collapse {
		keep = lc.max * 3 / 8
	}
	budget := lc.max/2 - keep
	from := max(cut-keep, 0)
	err := lc.fs.writeAtomicFunc(path.Dir(rel), path.Base(rel)+RotatedSuffix, false, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(f, from, cut-from))
		for round := 0; err == nil && !collapse && round < 4 && budget > 0; round++ {
			fi, serr := f.Stat()
			if serr != nil || fi.Size() <= cut {
				break
			}
			var n int64
			n, err = io.Copy(w, io.NewSectionReader(f, cut, min(fi.Size()-cut, budget)))
			cut, budget = cut+n, budget-n
		}
		return err
	})
	return cut, err
}

// warn logs a rotation failure, at most once a minute per log.
func (lc *logCap) warn(rel, msg string, err error) {
	now := time.Now()
	lc.mu.Lock()
	last, seen := lc.warned[rel]
	quiet := seen && now.Sub(last) < time.Minute
	if !quiet {
		lc.warned[rel] = now
	}
	lc.mu.Unlock()
	if !quiet {
		lc.log.Warn(msg, "log", rel, "err", err)
	}
}
