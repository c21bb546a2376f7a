package logcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
)

// Each log has a write-time index beside it (stdout.log.idx): when each
// stretch of the log was written, so that its lines carry a time, can be
// picked by it (since) and merged with the other stream's in the order
// they were written. The child writes its log itself, so nothing tells
// the time of a byte but the moment it is seen: the cap's inotify event
// for it, taken within a few microseconds of the write while the daemon
// runs. A writer that knows better (the docker runtime copies the
// engine's timestamps) leaves on the file, as WrittenAtAttr, the time of
// what it is about to append, and that is taken instead. What a child wrote while the
// daemon was away is dated at the log's modification time when it is next
// watched (the time of its last byte: the best the file can tell).
//
// The file: a header (magic, the log's shift and the span its rotated
// file holds, so that positions survive a daemon restart), then records
// of 16 bytes, both fields ascending: a position of the log and a time
// (Unix nanoseconds) by which every byte before that position was
// written. The index is bounded (at most max/32 bytes of a log capped at
// max, with a floor of 4 KiB): a full one is thinned, every second record
// of its older half merged into the next (older lines are dated more
// coarsely, the newest stay exact), and rotation drops the records of
// what it rotated away.
const (
	IndexSuffix   = ".idx"
	WrittenAtAttr = "user.agent-control-plane.written-at"

	indexMagic = "acp-idx1"
	headerSize = 32
	recordSize = 16
)

// record says that a log's bytes before pos were written by at.
type record struct{ pos, at int64 }

// logState is what the cap knows of one log across rotations: guarded by
// its log's rotating lock (written under it, read under its read lock).
type logState struct {
	shift   int64 // how far its offsets have moved down: position = offset + shift
	kept    span  // the positions its rotated file (.1) holds
	last    record
	pending []record // seen, not yet in the index file
	count   int64    // records in the index file
}

// state is log rel's state, read from its index the first time.
func (lc *Cap) state(rel string) *logState {
	lc.statesMu.Lock()
	defer lc.statesMu.Unlock()
	if st, ok := lc.states[rel]; ok {
		return st
	}
	st := &logState{}
	if f, fi, err := lc.fs.OpenRegular(rel+IndexSuffix, unix.O_RDONLY); err == nil {
		var h [headerSize]byte
		if _, err := f.ReadAt(h[:], 0); err == nil && string(h[:8]) == indexMagic {
			st.shift = int64(binary.LittleEndian.Uint64(h[8:]))
			st.kept = span{int64(binary.LittleEndian.Uint64(h[16:])), int64(binary.LittleEndian.Uint64(h[24:]))}
			st.count = (fi.Size() - headerSize) / recordSize
			if st.count > 0 {
				var r [recordSize]byte
				if _, err := f.ReadAt(r[:], headerSize+(st.count-1)*recordSize); err == nil {
					st.last = decodeRecord(r[:])
				}
			}
		} else if err == nil || !errors.Is(err, io.EOF) {
			lc.warn(rel, "log index unreadable; its lines are dated anew", err)
		}
		f.Close()
	}
	lc.states[rel] = st
	return st
}

func decodeRecord(b []byte) record {
	return record{int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:]))}
}

func (r record) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(r.pos))
	return binary.LittleEndian.AppendUint64(b, uint64(r.at))
}

// writtenAt is the time a writer left on log f for what it appends
// (WrittenAtAttr).
func writtenAt(f *os.File) (time.Time, bool) {
	var buf [64]byte
	n, err := unix.Fgetxattr(int(f.Fd()), WrittenAtAttr, buf[:])
	if err != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(buf[:n]))
	return t, err == nil
}

// note records that log rel (f, of size bytes) was written by at. The
// caller holds the log's rotating lock.
func (lc *Cap) note(st *logState, f *os.File, size int64, at time.Time) {
	if t, ok := writtenAt(f); ok {
		at = t
	}
	r := record{size + st.shift, at.UnixNano()}
	if r.pos <= st.last.pos {
		return
	}
	r.at = max(r.at, st.last.at)
	st.pending, st.last = append(st.pending, r), r
}

// maxRecords bounds a log's index.
func (lc *Cap) maxRecords() int64 { return max(lc.max/32, 4<<10) / recordSize }

// flush writes log rel's pending records to its index: appended, or, when
// that would pass the bound, the index thinned and written anew.
func (lc *Cap) flush(rel string) {
	mu := lc.rotatingOf(rel)
	mu.Lock()
	defer mu.Unlock()
	st := lc.state(rel)
	if len(st.pending) == 0 {
		return
	}
	if st.count == 0 || st.count+int64(len(st.pending)) > lc.maxRecords() {
		lc.rewriteIndex(rel, st)
		return
	}
	f, err := lc.fs.OpenFile(rel+IndexSuffix, unix.O_WRONLY|unix.O_APPEND|unix.O_NONBLOCK, 0)
	if err != nil {
		lc.rewriteIndex(rel, st) // gone or never made: made anew
		return
	}
	defer f.Close()
	b := make([]byte, 0, len(st.pending)*recordSize)
	for _, r := range st.pending {
		b = r.append(b)
	}
	if _, err := f.Write(b); err != nil {
		lc.warn(rel, "append to log index", err)
	}
	st.count += int64(len(st.pending))
	st.pending = st.pending[:0]
}

// rewriteIndex writes log rel's index anew, atomically: its header, and
// its records (the file's and the pending ones) that date what the log
// still holds, thinned to fit the bound. The caller holds the log's rotating lock.
func (lc *Cap) rewriteIndex(rel string, st *logState) {
	rs, err := lc.readRecords(rel, st, 0)
	if err != nil {
		lc.warn(rel, "read log index", err)
	}
	rs = append(rs, st.pending...)
	oldest := st.shift
	if st.kept.to > st.kept.from {
		oldest = min(oldest, st.kept.from)
	}
	i := sort.Search(len(rs), func(i int) bool { return rs[i].pos > oldest })
	rs = rs[i:]
	for limit := int(lc.maxRecords() * 3 / 4); len(rs) > limit; {
		// Thin the older half: each pair becomes its later record (a
		// byte is never dated before it was seen).
		older := len(rs) / 2
		thin := rs[:0]
		for j := 1; j < older; j += 2 {
			thin = append(thin, rs[j])
		}
		if older%2 == 1 {
			thin = append(thin, rs[older-1])
		}
		if rs = append(thin, rs[older:]...); len(rs) > limit && older < 2 {
			break
		}
	}
	b := make([]byte, 0, headerSize+len(rs)*recordSize)
	b = append(b, indexMagic...)
	for _, v := range []int64{st.shift, st.kept.from, st.kept.to} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for _, r := range rs {
		b = r.append(b)
	}
	name := path.Base(rel) + IndexSuffix
	if err := lc.fs.WriteAtomic(path.Dir(rel), name, lc.tempName(name), 0o600, securefs.NoSync, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		lc.warn(rel, "write log index", err)
		return
	}
	st.count, st.pending = int64(len(rs)), st.pending[:0]
}

// readRecords reads log rel's indexed records that end after position
// from. The caller holds the log's rotating lock (or its read lock).
func (lc *Cap) readRecords(rel string, st *logState, from int64) ([]record, error) {
	f, fi, err := lc.fs.OpenRegular(rel+IndexSuffix, unix.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := min((fi.Size()-headerSize)/recordSize, st.count)
	if n <= 0 {
		return nil, nil
	}
	at := func(i int64) (record, error) {
		var b [recordSize]byte
		_, err := f.ReadAt(b[:], headerSize+i*recordSize)
		return decodeRecord(b[:]), err
	}
	// The first record ending after from, found on disk.
	lo, hi := int64(0), n
	for lo < hi {
		mid := (lo + hi) / 2
		r, err := at(mid)
		if err != nil {
			return nil, err
		}
		if r.pos > from {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	b := make([]byte, (n-lo)*recordSize)
	if _, err := f.ReadAt(b, headerSize+lo*recordSize); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	rs := make([]record, 0, len(b)/recordSize)
	for len(b) >= recordSize {
		rs = append(rs, decodeRecord(b))
		b = b[recordSize:]
	}
	return rs, nil
}

// Stamps dates the lines of log rel that end at positions ends
// (ascending): each gets the time by which its last byte was written. A
// line the cap has not seen yet (written a moment ago, or before the log
// had an index) gets the log's modification time.
func (lc *Cap) Stamps(rel string, ends []int64) []time.Time {
	out := make([]time.Time, len(ends))
	if len(ends) == 0 {
		return out
	}
	mu := lc.rotatingOf(rel)
	mu.RLock()
	st := lc.state(rel)
	rs, err := lc.readRecords(rel, st, ends[0]-1)
	if err != nil {
		lc.warn(rel, "read log index", err)
	}
	rs = append(rs, st.pending...)
	mu.RUnlock()
	var mtime time.Time
	for i, end := range ends {
		j := sort.Search(len(rs), func(j int) bool { return rs[j].pos >= end })
		if j < len(rs) {
			out[i] = time.Unix(0, rs[j].at)
			continue
		}
		if mtime.IsZero() {
			mtime = time.Now()
			if fi, err := lc.fs.Lstat(rel); err == nil {
				mtime = fi.ModTime()
			}
		}
		out[i] = mtime
	}
	return out
}

// SinceFrom is the position of log rel from which on its bytes were
// written at or after t (or the oldest it holds).
func (lc *Cap) SinceFrom(rel string, t time.Time) int64 {
	mu := lc.rotatingOf(rel)
	mu.RLock()
	defer mu.RUnlock()
	st := lc.state(rel)
	rs, err := lc.readRecords(rel, st, 0)
	if err != nil {
		lc.warn(rel, "read log index", err)
	}
	rs = append(rs, st.pending...)
	at := t.UnixNano()
	if i := sort.Search(len(rs), func(i int) bool { return rs[i].at >= at }); i > 0 {
		return rs[i-1].pos
	}
	return 0
}

// A Line is one line of a log (with its newline, but for a last line not
// yet ended), where it ends (a position) and when it was written.
type Line struct {
	Text string
	End  int64
	At   time.Time
}

// SplitLines cuts text, read from a log at position start, into lines.
func SplitLines(text []byte, start int64) []Line {
	var out []Line
	for len(text) > 0 {
		n := bytes.IndexByte(text, '\n') + 1
		if n == 0 {
			n = len(text)
		}
		start += int64(n)
		out = append(out, Line{Text: string(text[:n]), End: start})
		text = text[n:]
	}
	return out
}

// Date gives each of lines (of log rel, ascending) its time.
func (lc *Cap) Date(rel string, lines []Line) {
	ends := make([]int64, len(lines))
	for i, l := range lines {
		ends[i] = l.End
	}
	for i, t := range lc.Stamps(rel, ends) {
		lines[i].At = t
	}
}

// Merge merges two streams' dated lines in the order they were written:
// by time, a's first where equal; each stream's own order is kept.
func Merge[T any](a, b []T, at func(T) time.Time) []T {
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if at(b[0]).Before(at(a[0])) {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return slices.Concat(out, a, b)
}
