package fileops

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// MaxArchiveEntries bounds the entries one archive holds, either way.
const MaxArchiveEntries = 100000

// ErrArchive: a tar stream to extract is not one, or holds an entry that
// cannot be extracted as it is (a name leading out, too many entries).
var ErrArchive = errors.New("bad archive")

// Tar writes name, a file or a directory and everything beneath it, to w
// as a tar stream, as docker cp does: each entry named from name's last
// element on (src/a/b), with its permission bits and time; a link as a
// link, never followed; other kinds (sockets, devices) left out. At
// most MaxArchiveEntries entries; past them it fails, the stream cut.
func Tar(ctx context.Context, f runtime.Files, name string, w io.Writer) error {
	fi, err := f.Stat(ctx, name)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	n := 0
	var walk func(name, as string, fi runtime.FileInfo) error
	walk = func(name, as string, fi runtime.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if n++; n > MaxArchiveEntries {
			return fmt.Errorf("%w: more than %d entries", ErrArchive, MaxArchiveEntries)
		}
		hdr := &tar.Header{Name: as, Mode: int64(fi.Mode.Perm()), ModTime: fi.ModTime, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, as+"/"
		case fi.Mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, fi.Link
		case fi.Mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size
		default:
			return nil
		}
		if hdr.Typeflag == tar.TypeReg {
			return tarFile(ctx, f, name, hdr, tw)
		}
		if err := tw.WriteHeader(hdr); err != nil || !fi.IsDir() {
			return err
		}
		list, err := f.List(ctx, name)
		if err != nil {
			return err
		}
		for _, e := range list {
			// as+"/": "." stays "./a" (path.Join would make it "a",
			// and the entries would not all begin with the first).
			if err := walk(path.Join(name, e.Name), as+"/"+e.Name, e); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(name, path.Base(name), fi); err != nil {
		return err
	}
	return tw.Close()
}

// tarFile writes one regular file: its size is what was read when the
// header was written (a file that grew is cut there, one that shrank
// padded with zeros, so the stream stays whole).
func tarFile(ctx context.Context, f runtime.Files, name string, hdr *tar.Header, tw *tar.Writer) error {
	rc, fi, err := f.Open(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	hdr.Size = fi.Size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(rc, hdr.Size))
	if err != nil {
		return err
	}
	_, err = io.CopyN(tw, zeros{}, hdr.Size-n)
	return err
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// Extracted is what Untar made.
type Extracted struct {
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Links int   `json:"links"`
	Bytes int64 `json:"bytes"`
	// Skipped are the entries not made: hard links, devices, FIFOs.
	Skipped []string `json:"skipped,omitempty"`
}

// Untar extracts the tar stream r beneath dir, a directory made (with its
// parents) when missing, as docker cp does: directories and regular
// files with their permission bits, links as links, merged into what is
// there (a file replaced whole, atomically). A directory's mode is set
// once everything beneath it is written, so a read-only one still takes
// its files. A name that would lead out of dir (ErrArchive and
// runtime.ErrOutside), more than MaxArchiveEntries entries (ErrArchive)
// or more than maxBytes of content (ErrTooLarge) fail it; what it made
// that was not there before is then removed again (a file it replaced
// keeps its new content).
func Untar(ctx context.Context, f runtime.Files, dir string, r io.Reader, maxBytes int64) (Extracted, error) {
	u := untar{ctx: ctx, f: f, dir: dir, max: maxBytes, there: map[string]bool{}}
	top := "" // the first of dir's names, upwards, that is not there
	for p := dir; !u.exists(p) && p != path.Dir(p); p = path.Dir(p) {
		top = p
	}
	if top != "" {
		u.made = append(u.made, top)
	}
	err := u.mkdir(dir)
	tr := tar.NewReader(r)
	for n := 1; err == nil; n++ {
		var hdr *tar.Header
		switch hdr, err = tr.Next(); {
		case err == io.EOF:
			err = u.setModes()
			return u.out, err
		case err != nil:
			err = fmt.Errorf("%w: %v", ErrArchive, err)
		case n > MaxArchiveEntries:
			err = fmt.Errorf("%w: more than %d entries", ErrArchive, MaxArchiveEntries)
		default:
			err = u.entry(hdr, tr)
		}
	}
	for i := len(u.made) - 1; i >= 0; i-- {
		f.Remove(context.WithoutCancel(ctx), u.made[i], true)
	}
	return u.out, err
}

// untar is one extraction under way.
type untar struct {
	ctx   context.Context
	f     runtime.Files
	dir   string
	max   int64
	out   Extracted
	made  []string        // names it created, in order: what a failure removes
	there map[string]bool // names known to be there (a Stat saved)
	modes []dirMode       // directories' modes, set at the end
}

type dirMode struct {
	name string
	mode fs.FileMode
}

// exists reports whether name is there, remembering the names that are.
func (u *untar) exists(name string) bool {
	if !u.there[name] {
		_, err := u.f.Stat(u.ctx, name)
		u.there[name] = err == nil
	}
	return u.there[name]
}

// mkdir makes directory name and its parents, once.
func (u *untar) mkdir(name string) error {
	if u.there[name] {
		return nil
	}
	if err := u.f.Mkdir(u.ctx, name, 0o755); err != nil {
		return err
	}
	for p := name; p != u.dir && p != path.Dir(p); p = path.Dir(p) {
		u.there[p] = true
	}
	u.there[u.dir] = true
	return nil
}

// entry extracts one entry of the tar.
func (u *untar) entry(hdr *tar.Header, tr io.Reader) error {
	rel, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	name, perm := path.Join(u.dir, rel), fs.FileMode(hdr.Mode).Perm()
	if rel == "" || hdr.Typeflag != tar.TypeDir && hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeSymlink {
		if rel != "" {
			u.out.Skipped = append(u.out.Skipped, rel)
		}
		return nil // "./" is dir itself
	}
	if len(u.made) == 0 || !within(name, u.made[len(u.made)-1]) {
		if m := firstMissing(u.dir, rel, u.exists); m != "" {
			u.made = append(u.made, m)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		u.out.Dirs++
		u.modes = append(u.modes, dirMode{name, perm})
		return u.mkdir(name)
	case tar.TypeReg:
		if u.out.Bytes += hdr.Size; u.out.Bytes > u.max {
			return fmt.Errorf("%w: more than %d bytes of files (config max_upload_bytes)", ErrTooLarge, u.max)
		}
		u.out.Files++
		if err := u.mkdir(path.Dir(name)); err != nil {
			return err
		}
		if _, err := u.f.Write(u.ctx, name, tr, perm); err != nil {
			return err
		}
		u.there[name] = true
		return u.f.Chmod(u.ctx, name, perm)
	}
	u.out.Links++
	if err := u.mkdir(path.Dir(name)); err != nil {
		return err
	}
	return untarLink(u.ctx, u.f, name, hdr.Linkname)
}

// setModes gives the directories their modes, deepest last made first.
func (u *untar) setModes() error {
	for i := len(u.modes) - 1; i >= 0; i-- {
		if err := u.f.Chmod(u.ctx, u.modes[i].name, u.modes[i].mode); err != nil {
			return err
		}
	}
	return nil
}

// untarLink makes name a link to target, replacing a file or a link
// there (not a directory).
func untarLink(ctx context.Context, f runtime.Files, name, target string) error {
	if fi, err := f.Stat(ctx, name); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%w: %s is a directory; a link cannot replace it", ErrArchive, clip(name))
		}
		if err := f.Remove(ctx, name, false); err != nil {
			return err
		}
	}
	return f.Symlink(ctx, target, name)
}

// firstMissing is the first of rel's names, from dir down, that is not
// there: what removing undoes an entry named rel.
func firstMissing(dir, rel string, exists func(string) bool) string {
	name := dir
	for _, part := range strings.Split(rel, "/") {
		if name = path.Join(name, part); !exists(name) {
			return name
		}
	}
	return ""
}

// within reports whether name is dir or beneath it.
func within(name, dir string) bool {
	return name == dir || strings.HasPrefix(name, dir+"/")
}

// entryName is a tar entry's name relative to where it is extracted:
// "" for the directory itself; an error for one that is not plainly
// beneath it (absolute, "..", or not in its clean form).
func entryName(name string) (string, error) {
	rel := strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
	if rel == "" || rel == "." {
		return "", nil
	}
	if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || path.Clean(rel) != rel || strings.IndexByte(rel, 0) >= 0 {
		return "", fmt.Errorf("%w: entry %q does not lie plainly beneath the directory it is extracted into (%w)", ErrArchive, clip(name), runtime.ErrOutside)
	}
	return rel, nil
}

// clip is at most 200 bytes of a name, for a message.
func clip(name string) string {
	if len(name) <= 200 {
		return name
	}
	return strings.ToValidUTF8(name[:200], "") + "…"
}
