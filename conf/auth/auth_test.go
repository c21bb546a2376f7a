package auth

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLoadCreatesPrivateFileAndReusesIt(t *testing.T) {
	for _, mask := range []int{0o000, 0o022} {
		path := filepath.Join(t.TempDir(), "state", "agent-control-plane", "token")
		prev := syscall.Umask(mask)
		tok, src, err := Load("", path)
		syscall.Umask(prev)
		if err != nil || src != CreatedFile || len(tok) != 64 {
			t.Fatalf("first load: %q %q %v", tok, src, err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("token file mode %v %v, want 0600", fi.Mode(), err)
		}
		again, src, err := Load("", path)
		if err != nil || again != tok || src != FromFile {
			t.Fatalf("second load: %q %q %v, want the same token from the file", again, src, err)
		}
		if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".token-*")); len(leftovers) != 0 {
			t.Fatalf("temporary files left: %v", leftovers)
		}
	}
}

func TestLoadPrefersGivenToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if tok, src, err := Load("given-token-0123456789", path); err != nil || tok != "given-token-0123456789" || src != FromEnv {
		t.Fatalf("%q %q %v", tok, src, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("a token file was made although a token was given")
	}
	if _, _, err := Load("short", path); err == nil {
		t.Fatal("a short token was accepted")
	}
}

func TestReadFileRefusesUnsafeFiles(t *testing.T) {
	dir := t.TempDir()
	good := New()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(good+"\n"), 0o600)
		os.Chmod(p, mode)
		return p
	}
	for _, c := range []struct {
		path string
		want string
	}{
		{write("world", 0o644), "group and others must have no access"},
		{write("group", 0o640), "group and others must have no access"},
		{write("writable", 0o602), "group and others must have no access"},
		{dir, "not a regular file"},
	} {
		if _, err := ReadFile(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
		if _, _, err := Load("", c.path); err == nil {
			t.Errorf("Load accepted %s", c.path)
		}
	}
	if got, err := ReadFile(write("ok", 0o600)); err != nil || got != good {
		t.Fatalf("private file: %q %v", got, err)
	}
	if os.Geteuid() == 0 {
		p := write("theirs", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("a file of another user: %v", err)
		}
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := ReadFile(short); err == nil {
		t.Fatal("a short token file was accepted")
	}
}

func TestFindOrder(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("file-token-0123456789\n"), 0o600)
	env := map[string]string{TokenFileEnv: file}
	getenv := func(k string) string { return env[k] }
	if tok, err := Find(getenv, ""); err != nil || tok != "file-token-0123456789" {
		t.Fatalf("from the file: %q %v", tok, err)
	}
	env[TokenEnv] = "env-token-0123456789"
	if tok, _ := Find(getenv, ""); tok != "env-token-0123456789" {
		t.Fatalf("the variable wins: %q", tok)
	}
	delete(env, TokenEnv)
	env[TokenFileEnv] = filepath.Join(dir, "missing")
	if tok, err := Find(getenv, ""); tok != "" || err != nil {
		t.Fatalf("no file is no token: %q %v", tok, err)
	}
	env = map[string]string{"XDG_STATE_HOME": "/s"}
	if p := DefaultFile(getenv); p != "/s/agent-control-plane/token" {
		t.Fatalf("default file %s", p)
	}
}
