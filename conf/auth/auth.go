// Package auth owns the daemon's bearer token: where it lives, how it is
// made, and how a presented token is checked. The daemon, the CLI and the Go
// client find it the same way: $AGENT_CONTROL_PLANE_TOKEN when set,
// otherwise the token file ($AGENT_CONTROL_PLANE_TOKEN_FILE, otherwise
// $XDG_STATE_HOME/agent-control-plane/token). It uses the standard library
// only, so that the Go client stays free of dependencies.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Environment variables.
const (
	TokenEnv     = "AGENT_CONTROL_PLANE_TOKEN"
	TokenFileEnv = "AGENT_CONTROL_PLANE_TOKEN_FILE"
)

// MinTokenLen is the shortest token accepted: a token that short can be
// guessed.
const MinTokenLen = 16

// maxTokenLen bounds what is read from a token file.
const maxTokenLen = 4096

// StateDir returns $XDG_STATE_HOME/agent-control-plane, or
// ~/.local/state/agent-control-plane.
func StateDir(getenv func(string) string) string {
	state := getenv("XDG_STATE_HOME")
	if state == "" {
		home := getenv("HOME")
		if home == "" {
			home = os.TempDir()
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "agent-control-plane")
}

// DefaultFile returns the token file's path when nothing names another:
// $AGENT_CONTROL_PLANE_TOKEN_FILE, else StateDir/token.
func DefaultFile(getenv func(string) string) string {
	if p := getenv(TokenFileEnv); p != "" {
		return p
	}
	return filepath.Join(StateDir(getenv), "token")
}

// Find returns the token a client sends: $AGENT_CONTROL_PLANE_TOKEN, else
// the content of the token file (file, or DefaultFile when empty). A
// missing file is no token and no error.
func Find(getenv func(string) string, file string) (string, error) {
	if t := strings.TrimSpace(getenv(TokenEnv)); t != "" {
		return t, nil
	}
	if file == "" {
		file = DefaultFile(getenv)
	}
	t, err := ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return t, err
}

// ReadFile reads a token file. It refuses a file that is not a regular
// file, is owned by another user, or that group or others can read or
// write: the token is the key to every sandbox.
func ReadFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if err := checkPrivate(path, fi); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenLen+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenLen {
		return "", fmt.Errorf("token file %s is larger than %d bytes", path, maxTokenLen)
	}
	t := strings.TrimSpace(string(b))
	if err := Validate(t); err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	return t, nil
}

func checkPrivate(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("token file %s is not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("token file %s is owned by uid %d, not by this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("token file %s has mode %04o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	return nil
}

// Validate checks a token's shape: long enough, printable, no spaces.
func Validate(t string) error {
	if len(t) < MinTokenLen {
		return fmt.Errorf("the token is shorter than %d characters", MinTokenLen)
	}
	for _, c := range []byte(t) {
		if c <= ' ' || c >= 0x7f {
			return errors.New("the token must be printable ASCII without spaces")
		}
	}
	return nil
}

// New returns a fresh random 256-bit token, hex-encoded.
func New() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Source says where the daemon's token came from, for its log.
type Source string

const (
	FromEnv     Source = "environment"
	FromFile    Source = "file"
	CreatedFile Source = "created file"
)

// Load returns the daemon's token: token when it is not empty (the
// daemon's $AGENT_CONTROL_PLANE_TOKEN), else the token file at path, which
// is created with a fresh token (mode 0600, never replacing anything) when
// it does not exist.
func Load(token, path string) (string, Source, error) {
	if token != "" {
		if err := Validate(token); err != nil {
			return "", "", fmt.Errorf("%s: %w", TokenEnv, err)
		}
		return token, FromEnv, nil
	}
	t, err := ReadFile(path)
	if err == nil {
		return t, FromFile, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	if err := create(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", fmt.Errorf("create token file %s: %w", path, err)
	}
	// Read back what is there now: another daemon may have won the race.
	t, err = ReadFile(path)
	if err != nil {
		return "", "", err
	}
	return t, CreatedFile, nil
}

// create writes a fresh token to path: a temporary file with mode 0600
// from its first byte, linked into place only if nothing has that name.
func create(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(New() + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Link(f.Name(), path)
}

// Equal compares a presented token with the expected one in constant time
// (also with respect to their lengths).
func Equal(presented, want string) bool {
	if want == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// IsLoopbackHost reports whether host is "localhost" or a loopback IP:
// the hosts where the token is what stands between a caller and the
// daemon (a listen address, a Host header, a daemon URL).
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.IsLoopback()
}

// AddressFile is where a daemon whose token file is tokenFile writes the
// URL it serves at: beside the token, for clients told no other address
// (as docker's contexts and kubectl's config tell theirs).
func AddressFile(tokenFile string) string {
	return filepath.Join(filepath.Dir(tokenFile), "address")
}

// WriteAddress writes url to the address file beside tokenFile (mode
// 0600), replacing what is there at once: a reader sees the old address
// or the new.
func WriteAddress(tokenFile, url string) error {
	path := AddressFile(tokenFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".address-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(url + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// RemoveAddress removes the address file beside tokenFile if it still
// holds url (another daemon may have written its own since).
func RemoveAddress(tokenFile, url string) {
	path := AddressFile(tokenFile)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == url {
		_ = os.Remove(path)
	}
}

// maxAddressLen bounds what is read from an address file.
const maxAddressLen = 512

// FindAddress is the URL in the address file beside the token file
// clients find (DefaultFile), "" when there is none or it is not one.
func FindAddress(getenv func(string) string) string {
	return ReadAddress(DefaultFile(getenv))
}

// ReadAddress is the URL a running daemon whose token file is tokenFile
// wrote beside it, or "".
func ReadAddress(tokenFile string) string {
	f, err := os.Open(AddressFile(tokenFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxAddressLen+1))
	u := strings.TrimSpace(string(b))
	if len(b) > maxAddressLen || !strings.HasPrefix(u, "http://") || strings.ContainsAny(u, " \n\t") {
		return ""
	}
	return u
}
