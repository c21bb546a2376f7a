package logcap

// Tail keeps the last bytes written to it, at most its bound: the output
// of a command, held in memory while it runs and after. It is not safe
// for concurrent use.
type Tail struct {
	max   int
	buf   []byte
	total int64 // bytes ever written
}

// NewTail keeps the last max bytes.
func NewTail(max int) *Tail { return &Tail{max: max} }

// Write keeps the tail of what it is given; it never fails.
func (t *Tail) Write(b []byte) (int, error) {
	t.total += int64(len(b))
	if len(b) >= t.max {
		t.buf = append(t.buf[:0], b[len(b)-t.max:]...)
		return len(b), nil
	}
	if over := len(t.buf) + len(b) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, b...)
	return len(b), nil
}

// String is what is kept.
func (t *Tail) String() string { return string(t.buf) }

// Cut reports whether more was written than is kept.
func (t *Tail) Cut() bool { return t.total > int64(len(t.buf)) }

// Since is what was written from offset off (of everything ever written)
// on, as far as it is still kept, and the offset after it.
func (t *Tail) Since(off int64) (string, int64) {
	start := t.total - int64(len(t.buf))
	if off < start {
		off = start
	}
	return string(t.buf[off-start:]), t.total
}

// Len is how many bytes are kept.
func (t *Tail) Len() int { return len(t.buf) }

// Drop forgets what is kept; what was written still counts, so Cut
// reports it.
func (t *Tail) Drop() { t.buf = nil }
