package fileops

import (
	"bytes"
	"testing"
)

// The streamed replacement is bytes.ReplaceAll, whatever the text and
// wherever its 64 KiB blocks cut it: a text repeated past a block puts
// matches across the cut.
func FuzzReplaceStream(f *testing.F) {
	f.Add([]byte("a needle b"), []byte("needle"), []byte("pin"), uint16(7000))
	f.Add([]byte("aaaa"), []byte("aa"), []byte("a"), uint16(20000))
	f.Add([]byte("xyz"), []byte("yzx"), []byte(""), uint16(30000))
	f.Fuzz(func(t *testing.T, data, old, new []byte, reps uint16) {
		if len(old) == 0 || len(old) > MaxPattern || len(data) == 0 {
			return
		}
		src := bytes.Repeat(data, int(reps)%(1<<16/len(data)+2)+1)
		if len(src) > 1<<20 {
			src = src[:1<<20]
		}
		var out bytes.Buffer
		written, count, err := replaceStream(&out, bytes.NewReader(src), old, new)
		want := bytes.ReplaceAll(src, old, new)
		if err != nil || !bytes.Equal(out.Bytes(), want) || written != int64(len(want)) || count != bytes.Count(src, old) {
			t.Fatalf("replace %q with %q in %d bytes: %d replaced, %d written, %v; want %d, %d", old, new, len(src), count, written, err, bytes.Count(src, old), len(want))
		}
	})
}
