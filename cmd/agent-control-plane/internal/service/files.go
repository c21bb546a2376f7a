package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
)

// OnPath reports whether dir is one of $PATH's directories.
func OnPath(dir string) bool {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.Clean(d) == filepath.Clean(dir) {
			return true
		}
	}
	return false
}

// InstalledBinary returns the binary the service unit at path says
// install copied, when the file there still has the hash recorded;
// otherwise "" and why it is not removed ("" when there is no binary to
// speak of).
func InstalledBinary(path string) (binary, why string) {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte(UnitHeader)) {
		return "", ""
	}
	var want string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, BinaryLine); ok {
			if i := strings.LastIndex(rest, " sha256:"); i > 0 {
				binary, want = rest[:i], rest[i+len(" sha256:"):]
			}
		}
	}
	if binary == "" {
		return "", "the service does not say which binary install copied (written by an older install)"
	}
	sum, err := FileSum(binary)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", ""
	case err != nil:
		return "", err.Error()
	case sum != want:
		return "", binary + " is not the file install copied (its content changed)"
	}
	return binary, ""
}

// FileSum is the sha256 of a file, hex.
func FileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// OwnUnit refuses to replace a unit file that install did not write.
func OwnUnit(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte(UnitHeader)) {
		return fmt.Errorf("%s exists and was not written by agent-control-plane install; it is left alone (move it away to install)", path)
	}
	return nil
}

// LingerTip says how to keep the service running without a login session,
// when lingering is off.
func LingerTip() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join("/var/lib/systemd/linger", u.Username)); err == nil {
		return ""
	}
	return "Lingering is off for " + u.Username + ": the daemon stops when your last session ends. To keep it (and its sandboxes' supervision) running: loginctl enable-linger " + u.Username
}

// CopyExecutable installs src at dst, mode 0755. It is a rename, not a
// write over the file: a running daemon keeps its binary, and nobody ever
// sees half of one.
func CopyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return ReplaceFile(dst, 0o755, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return ReplaceFile(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// ReplaceFile writes a file with fill under a temporary name in path's
// directory, with its mode set before any content, synced, then renamed
// over path.
func ReplaceFile(path string, perm os.FileMode, fill func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(perm)
	if err == nil {
		err = fill(tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
