// Package logcap keeps each live sandbox's stdout.log and stderr.log
// within a cap while the child writes to them, and serves their tail and
// what they gain to followers, across rotation.
package logcap

import (
	"errors"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
	"golang.org/x/sys/unix"
)

// The log files in a sandbox directory, and the suffix of a log's one
// rotated file: stdout.log.1.
const (
	Stdout        = "stdout.log"
	Stderr        = "stderr.log"
	RotatedSuffix = ".1"
)

// Files are the two logs, stdout first.
var Files = [2]string{Stdout, Stderr}

// Cap keeps each live sandbox's stdout.log and stderr.log within a cap
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
//     live file in whole blocks that the copy has already read, with
//     fallocate: FALLOC_FL_COLLAPSE_RANGE where the file system has it
//     (ext4, xfs; the file shrinks), else FALLOC_FL_PUNCH_HOLE (tmpfs,
//     btrfs; the head's blocks are freed and the size stays, readers start
//     at SEEK_DATA). Both leave the bytes after the head alone, so the
//     child's appends are never lost. Only where neither exists is the
//     file emptied with ftruncate after the copy has caught up with the
//     child; the bytes of the instant between the last copy and the
//     truncation can then be lost (as with logrotate's copytruncate). The
//     cut happens even when the copy fails (a full disk): the cap holds,
//     the older part is lost, and that is logged.
//   - Only the daemon's own files are touched, through its securefs.Dir.
type Cap struct {
	fs       *securefs.Dir
	tempName func(name string) string // of a rotated file being written
	max      int64
	log      *slog.Logger
	ino      *os.File // the inotify descriptor, in the runtime's poller
	fd       int      // the same descriptor, for inotify_add_watch (ino.Fd would make it blocking)

	// rotating serializes a log's rotations: the event loop, watch and
	// release may look at the same log at once, and two cuts computed
	// from one size would cut twice. Followers read under its read lock,
	// so that a cut and the shift it makes are seen together. Striped by
	// log (rotatingOf): one lock for every log made each create and stop
	// wait for the others' opens, stats and index writes (hundreds at
	// once in a burst); a stripe is fixed by the log's name, so it
	// outlives the log's state (Forget).
	rotating [64]sync.RWMutex
	seed     maphash.Seed // of rotatingOf's hash
	// states: per log, how far its offsets have moved down (a collapsed
	// or truncated head), so that a position (offset + shift) survives
	// rotation and a daemon restart; the positions its rotated file holds
	// (a follower a rotation overtook reads on from there); its write-time
	// index (index.go). The map is guarded by statesMu, each state by
	// its log's rotating lock.
	statesMu sync.Mutex
	states   map[string]*logState

	mu      sync.Mutex
	byWatch map[int32]string // Watch descriptor → log (relative to the root)
	byLog   map[string]int32
	warned  map[string]time.Time // rotation failures, logged once a minute
	// waiting: per log, a channel closed at its next write (followers).
	waiting map[string]chan struct{}

	done chan struct{}
}

// rotatingOf is log rel's rotating lock.
func (lc *Cap) rotatingOf(rel string) *sync.RWMutex {
	return &lc.rotating[maphash.String(lc.seed, rel)%uint64(len(lc.rotating))]
}

// cutMode is the best way to cut a log's head that the root's file system
// has not refused (CutCollapse, CutPunch, CutTruncate).
var cutMode atomic.Int32

// New starts the rotator for the logs beneath dir (paths "ID/stdout.log"),
// each capped at about max bytes on disk; tempName names the temporary
// file of a rotated file being written (one a crash may leave behind, and
// that its owner can prove it made).
func New(dir *securefs.Dir, tempName func(name string) string, max int64, log *slog.Logger) (*Cap, error) {
	lc := &Cap{fs: dir, tempName: tempName, max: max, log: log, byWatch: map[int32]string{}, byLog: map[string]int32{},
		warned: map[string]time.Time{}, waiting: map[string]chan struct{}{}, states: map[string]*logState{},
		seed: maphash.MakeSeed(), done: make(chan struct{})}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	lc.ino, lc.fd = os.NewFile(uintptr(fd), "inotify"), fd
	go lc.run()
	return lc, nil
}

// Close stops the rotator and waits for it.
func (lc *Cap) Close() {
	lc.ino.Close()
	<-lc.done
}

// watch starts capping sandbox id's logs, and rotates them at once if
// they are over (a re-adopted child wrote while no daemon was watching).
func (lc *Cap) Watch(id string) {
	for _, name := range Files {
		rel := id + "/" + name
		wd, err := unix.InotifyAddWatch(lc.fd, lc.fs.Abs(rel), unix.IN_MODIFY|unix.IN_DONT_FOLLOW)
		if err != nil {
			lc.log.Warn("watch log for its cap", "sandbox", id, "log", name, "err", err)
			continue
		}
		lc.mu.Lock()
		lc.byWatch[int32(wd)], lc.byLog[rel] = rel, int32(wd)
		lc.mu.Unlock()
		lc.rotate(rel, false)
		lc.flush(rel)
		// What was written before the watch made no event: a follower
		// that waits from before reads again now.
		lc.wake(rel)
	}
}

// Release stops capping sandbox id's logs, after a last rotation: its
// workload is gone and writes no more.
func (lc *Cap) Release(id string) {
	for _, name := range Files {
		rel := id + "/" + name
		lc.mu.Lock()
		wd, ok := lc.byLog[rel]
		delete(lc.byLog, rel)
		delete(lc.byWatch, wd)
		delete(lc.warned, rel)
		lc.mu.Unlock()
		if ok {
			_, _ = unix.InotifyRmWatch(lc.fd, uint32(wd))
			lc.rotate(rel, false)
			lc.flush(rel)
		}
	}
}

// run reads inotify events until close: each write is dated (in the
// order the events came, so that two streams' writes keep their order)
// and its log rotated if due; then the batch's records are written and
// the logs' followers woken.
func (lc *Cap) run() {
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
		var seen []string
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
			if ok {
				if !slices.Contains(seen, rel) {
					seen = append(seen, rel)
				}
				lc.rotate(rel, true)
			}
		}
		for _, rel := range seen {
			lc.flush(rel)
			lc.wake(rel)
		}
	}
}

// Wait returns a channel closed at log rel's next write (while it is
// watched: its sandbox runs).
func (lc *Cap) Wait(rel string) <-chan struct{} {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	c, ok := lc.waiting[rel]
	if !ok {
		c = make(chan struct{})
		lc.waiting[rel] = c
	}
	return c
}

// wake tells log rel's followers that it was written to.
func (lc *Cap) wake(rel string) {
	lc.mu.Lock()
	c, ok := lc.waiting[rel]
	delete(lc.waiting, rel)
	lc.mu.Unlock()
	if ok {
		close(c)
	}
}

// Forget drops what the cap knows of sandbox id's logs (it is deleted),
// waking any follower so that it sees them gone.
func (lc *Cap) Forget(id string) {
	for _, name := range Files {
		rel := id + "/" + name
		lc.statesMu.Lock()
		delete(lc.states, rel)
		lc.statesMu.Unlock()
		lc.wake(rel)
	}
}

// ReadFrom reads up to n bytes of log rel from position pos (an offset
// that rotation does not move) and returns them with the position after
// them. A position whose bytes were rotated away moves to the oldest data
// the live file still holds, and skipped says so.
func (lc *Cap) ReadFrom(rel string, pos int64, n int) (b []byte, next int64, skipped bool, err error) {
	mu := lc.rotatingOf(rel)
	mu.RLock()
	defer mu.RUnlock()
	st := lc.state(rel)
	shift := st.shift
	f, fi, err := lc.fs.OpenRegular(rel, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, pos, false, nil
	}
	if err != nil {
		return nil, pos, false, err
	}
	defer f.Close()
	size := fi.Size()
	off := pos - shift
	ds := dataStart(f, size)
	if off < ds {
		// Rotated since it was reached: on from the rotated file, if it
		// still holds it.
		if k := st.kept; pos < k.to {
			if pos < k.from {
				pos, skipped = k.from, true
			}
			if b, err := lc.readAt(rel+RotatedSuffix, pos-k.from, min(int64(n), k.to-pos)); err == nil && len(b) > 0 {
				return b, pos + int64(len(b)), skipped, nil
			}
		}
		off, skipped = ds, true
	}
	if off > size { // not a position of this log (cannot happen)
		off, skipped = ds, true
	}
	b = make([]byte, min(int64(n), size-off))
	m, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:m], off + int64(m) + shift, skipped, err
}

// readAt reads up to n bytes of file rel at off.
func (lc *Cap) readAt(rel string, off, n int64) ([]byte, error) {
	f, _, err := lc.fs.OpenRegular(rel, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:m], err
}

// TailFrom is the position tail bytes before the end of log rel (or its
// oldest data: in its rotated file when that holds what comes just before
// the live file), and whether that is mid-file, where a line may be cut:
// then the position is one byte earlier, so that a reader dropping up to
// the first newline keeps a line that starts right at it.
func (lc *Cap) TailFrom(rel string, tail int64) (pos int64, mid bool, err error) {
	mu := lc.rotatingOf(rel)
	mu.RLock()
	defer mu.RUnlock()
	st := lc.state(rel)
	shift := st.shift
	f, fi, err := lc.fs.OpenRegular(rel, unix.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return shift, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	live := dataStart(f, fi.Size()) + shift
	oldest := live
	pos = max(fi.Size()+shift-tail, live)
	if k := st.kept; pos == live && k.to == live && k.from < live {
		oldest = k.from
		pos = max(fi.Size()+shift-tail, k.from)
	}
	if pos > oldest {
		// From the byte before: a pos at a line's start keeps that line.
		return pos - 1, true, nil
	}
	return pos, pos > 0, nil
}

// How the head of a log is cut, best first. Each file system supports a
// prefix of these; rotation falls down the list once one is refused.
const (
	CutCollapse = iota // FALLOC_FL_COLLAPSE_RANGE: the file shrinks (ext4, xfs)
	CutPunch           // FALLOC_FL_PUNCH_HOLE: the head's blocks are freed, the size stays (tmpfs, btrfs)
	CutTruncate        // ftruncate(0) after the copy: may lose the last instant's bytes
)

// LimitCut makes every Cap cut no better than how, and returns what
// undoes it: for tests of the fallbacks on a file system that has the
// better ways.
func LimitCut(how int) (restore func()) {
	cutMode.Store(int32(how))
	return func() { cutMode.Store(CutCollapse) }
}

// dataStart is where a log's data begins: after the hole a punched head
// leaves (SEEK_DATA), or 0. size when there is no data.
func dataStart(f *os.File, size int64) int64 {
	off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return size
		}
		return 0
	}
	return min(off, size)
}

// rotate dates what log rel gained (now, for a write just seen; else at
// its modification time: written while no daemon watched, or before its
// workload ended) and moves its older part to rel.1 when its data has
// reached half the cap.
func (lc *Cap) rotate(rel string, seen bool) {
	mu := lc.rotatingOf(rel)
	mu.Lock()
	defer mu.Unlock()
	f, fi, err := lc.fs.OpenRegular(rel, unix.O_RDWR)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			lc.warn(rel, "rotate log: cannot open it", err)
		}
		return
	}
	defer f.Close()
	size := fi.Size()
	at := fi.ModTime()
	if seen {
		at = time.Now()
	}
	st := lc.state(rel)
	lc.note(st, f, size, at)
	start := dataStart(f, size)
	if size-start < lc.max/2 {
		return
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil || sfs.Bsize <= 0 {
		lc.warn(rel, "rotate log: statfs failed", err)
		return
	}
	for {
		how := int(cutMode.Load())
		from, cut, err := lc.keepOlder(f, rel, start, size, sfs.Bsize, how)
		if err != nil {
			lc.warn(rel, "rotate log: the older part could not be kept and is dropped to hold the cap", err)
		}
		if cut <= start {
			return
		}
		switch how {
		case CutCollapse:
			err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, cut)
		case CutPunch:
			err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, start, cut-start)
		default:
			err = f.Truncate(0)
		}
		if err == nil {
			if from < cut {
				st.kept = span{from + st.shift, cut + st.shift}
			}
			if how != CutPunch { // a punched head leaves the offsets as they were
				st.shift += cut
			}
			lc.rewriteIndex(rel, st)
			return
		}
		if how == CutTruncate || !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			lc.warn(rel, "rotate log: cutting the head failed", err)
			return
		}
		// This file system cannot: fall to the next way, and copy the
		// older part again for it.
		cutMode.CompareAndSwap(int32(how), int32(how+1))
	}
}

// span is a range of positions [from, to) of a log.
type span struct{ from, to int64 }

// keepOlder copies the newest max/2 bytes of the head of f (its data from
// start) to rel.1, atomically replacing it (anything older is dropped),
// and returns where what it kept starts and where the head may now be
// cut. Collapse and punch cut whole
// blocks (collapse never up to the end), so the head ends at a block
// boundary and nothing after it is touched: the child's appends are safe.
// Truncation empties the file, so the copy goes on, a few rounds at most,
// until it has caught up with the child, and the head is all it copied.
func (lc *Cap) keepOlder(f *os.File, rel string, start, size, bs int64, how int) (from, cut int64, err error) {
	cut = size / bs * bs
	if how == CutCollapse {
		cut = (size - 1) / bs * bs
	}
	keep := lc.max / 2
	if how == CutTruncate {
		cut, keep = size, lc.max*3/8 // a quarter kept free for the catching up
	}
	if cut <= start {
		return start, start, nil
	}
	budget := lc.max/2 - keep
	from = max(cut-keep, start)
	name := path.Base(rel) + RotatedSuffix
	err = lc.fs.WriteAtomic(path.Dir(rel), name, lc.tempName(name), 0o600, securefs.NoSync, func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(f, from, cut-from))
		for round := 0; err == nil && how == CutTruncate && round < 4 && budget > 0; round++ {
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
	if err != nil {
		from = cut // nothing kept
	}
	return from, cut, err
}

// warn logs a rotation failure, at most once a minute per log.
func (lc *Cap) warn(rel, msg string, err error) {
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
