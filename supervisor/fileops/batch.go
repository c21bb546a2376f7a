package fileops

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
)

// Bounds of moving many files at once.
const (
	// DefaultMaxUpload is the default bound of one upload into a sandbox
	// (the configuration's max_upload_bytes).
	DefaultMaxUpload = 1 << 30
	// MaxBatch is how many files one batch writes, or one bulk download
	// reads.
	MaxBatch = 100
)

// ErrBatchFull: a batch holds MaxBatch files already.
var ErrBatchFull = fmt.Errorf("at most %d files at once", MaxBatch)

// Batch writes files all or none, for an upload of many: each is staged
// under a hidden name beside its place (so that its move is a rename),
// Commit moves them into place once every one was written, and Abort (or
// a Commit that fails) removes what is still staged. A replaced file
// keeps its mode.
type Batch struct {
	// Parents: a file's missing parent directories are made (mode
	// 0755), and removed again when the batch is aborted.
	Parents bool
	f       runtime.Files
	staged  []staged
	made    []string // directories made for the batch, in the order made
}

type staged struct{ tmp, name string }

// NewBatch is a batch of writes to f.
func NewBatch(f runtime.Files) *Batch { return &Batch{f: f} }

// Len is how many files are staged.
func (b *Batch) Len() int { return len(b.staged) }

// Stage writes what r gives beside name (name's target, when links lead
// to it), mode perm for a new file.
func (b *Batch) Stage(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	if len(b.staged) >= MaxBatch {
		return fmt.Errorf("%w: %w", fs.ErrInvalid, ErrBatchFull)
	}
	// Through the links on its way, as far as they stay in the
	// workspace: a file written through a link lands at its target (a
	// dangling link's target is made).
	resolved, err := b.f.Resolve(ctx, name)
	if err != nil {
		return err
	}
	name = strings.TrimPrefix(strings.TrimPrefix(resolved, b.f.WorkDir()), "/")
	if name == "" {
		return fmt.Errorf("%w: the workspace itself is a directory", fs.ErrInvalid)
	}
	dir, _ := path.Split(name)
	if b.Parents && dir != "" {
		if err := b.mkdirs(ctx, path.Clean(dir)); err != nil {
			return err
		}
	}
	tmp := dir + ".acp-bulk-" + rand.Text()
	if _, err := b.f.Write(ctx, tmp, r, perm); err != nil {
		return err
	}
	b.staged = append(b.staged, staged{tmp, name})
	return nil
}

// Commit moves every staged file into place. A move that fails stops it:
// the files moved before stay (a rename cannot be taken back safely) and
// the rest are removed.
func (b *Batch) Commit(ctx context.Context) error {
	defer func() { b.made = nil }() // kept once their files are in place
	for len(b.staged) > 0 {
		s := b.staged[0]
		if fi, err := b.f.Stat(ctx, s.name); err == nil && fi.Mode.IsRegular() {
			_ = b.f.Chmod(ctx, s.tmp, fi.Mode.Perm())
		}
		if err := b.f.Rename(ctx, s.tmp, s.name); err != nil {
			b.Abort(ctx)
			return err
		}
		b.staged = b.staged[1:]
	}
	return nil
}

// Abort removes what is staged, and the directories made for it that
// are empty again; it runs on, whatever ctx says, so that nothing is left
// behind by a request that went away.
func (b *Batch) Abort(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for _, s := range b.staged {
		_ = b.f.Remove(ctx, s.tmp, false)
	}
	b.staged = nil
	for i := len(b.made) - 1; i >= 0; i-- {
		_ = b.f.Remove(ctx, b.made[i], false) // one that is not empty stays
	}
	b.made = nil
}

// mkdirs makes dir and its missing parents, one at a time so that each
// made is remembered.
func (b *Batch) mkdirs(ctx context.Context, dir string) error {
	var missing []string
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		fi, err := b.f.Stat(ctx, d)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%w: %s is not a directory", fs.ErrInvalid, d)
			}
			break
		}
		if errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("%w: a parent of %s is not a directory", fs.ErrInvalid, dir)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := b.f.Mkdir(ctx, missing[i], 0o755); err != nil {
			return err
		}
		b.made = append(b.made, missing[i])
	}
	return nil
}

// ParseMode reads octal permission bits ("0755", "755"); setuid, setgid
// and sticky bits are refused (the toolbox makes no such file).
func ParseMode(s string) (fs.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("mode %q is not octal permission bits such as 0755", s)
	}
	return fs.FileMode(m), nil
}
