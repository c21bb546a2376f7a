package native

import (
	"os"
	"path/filepath"
	"testing"
)

// An isolated sandbox's loopback is its own: a host whose resolver is on
// its loopback (systemd-resolved) has the sandbox ask pasta's DNS
// forward instead; any other resolver is reached as it is.
func TestLoopbackResolver(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		conf string
		want bool
	}{
		{"nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n", true},
		{"# generated\nnameserver ::1\n", true},
		{"", true}, // none named: the resolver asks the loopback
		{"nameserver 10.255.255.53\n", false},
		{"nameserver 127.0.0.53\nnameserver 192.168.1.1\n", false},
		{"nameserver bogus\n", false},
	} {
		path := filepath.Join(dir, "resolv.conf")
		if err := os.WriteFile(path, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := loopbackResolver(path); got != c.want {
			t.Errorf("%q: loopback %v, want %v", c.conf, got, c.want)
		}
	}
	if loopbackResolver(filepath.Join(dir, "none")) {
		t.Error("a missing resolv.conf counts as a loopback resolver")
	}
}

// A snapshot's program is bound in only when the sandbox would not find
// it by itself in the PATH directories it sees.
func TestUnseenProgram(t *testing.T) {
	home, ws := t.TempDir(), t.TempDir()
	for _, name := range []string{"sh", "mytool"} {
		if err := os.WriteFile(filepath.Join(home, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + home + ":/usr/bin:/bin"}
	if p, ok := unseen("sh", env, ws); ok {
		t.Errorf("sh is bound from %s although /bin has one the sandbox sees", p)
	}
	if p, ok := unseen("mytool", env, ws); !ok || p != filepath.Join(home, "mytool") {
		t.Errorf("a program only in the home: %q %v", p, ok)
	}
	if _, ok := unseen("/usr/bin/env", env, ws); ok {
		t.Error("a system program is bound")
	}
	if p, ok := unseen(filepath.Join(home, "mytool"), env, ws); !ok || p != filepath.Join(home, "mytool") {
		t.Errorf("a program named by its path outside: %q %v", p, ok)
	}
	if _, ok := unseen("nothing-by-this-name", env, ws); ok {
		t.Error("a program found nowhere is bound")
	}
}
