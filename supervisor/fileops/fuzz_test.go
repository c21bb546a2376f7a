package fileops

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/workspace"
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

// Whatever a tar holds, Untar writes nothing outside the directory it
// extracts into, and a failed extraction leaves nothing of its own.
func FuzzUntar(f *testing.F) {
	for _, names := range [][]string{{"a", "d/", "d/b"}, {"../x"}, {"/abs"}, {"d/", "d/../../y"}, {"l->/etc", "l/x"}} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, n := range names {
			hdr := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: 1}
			if strings.HasSuffix(n, "/") {
				hdr.Typeflag, hdr.Size = tar.TypeDir, 0
			} else if name, target, ok := strings.Cut(n, "->"); ok {
				hdr.Name, hdr.Linkname, hdr.Typeflag, hdr.Size = name, target, tar.TypeSymlink, 0
			}
			tw.WriteHeader(hdr)
			tw.Write([]byte("x")[:hdr.Size])
		}
		tw.Close()
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		outer := t.TempDir()
		ws := filepath.Join(outer, "ws")
		os.Mkdir(ws, 0o755)
		files := workspace.Files{Host: ws, Seen: ws}
		_, err := Untar(context.Background(), files, "into", bytes.NewReader(b), 64<<10)
		if entries, _ := os.ReadDir(outer); len(entries) != 1 {
			t.Fatalf("something beside the workspace: %v", entries)
		}
		if entries, _ := os.ReadDir(ws); err != nil && len(entries) != 0 {
			t.Fatalf("a failed extraction (%v) left %v", err, entries)
		}
	})
}
