package runtime

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestExitString(t *testing.T) {
	for _, tc := range []struct {
		exit Exit
		want string
	}{
		{Exit{Code: 0}, "exit code 0"},
		{Exit{Code: 3}, "exit code 3"},
		{Exit{Code: 137, Signal: unix.SIGKILL}, "killed by signal SIGKILL"},
		{Exit{Unknown: true}, "exited; status unknown"},
		{Exit{Code: 137, Signal: unix.SIGKILL, OOMKilled: true}, "killed: out of memory (signal SIGKILL)"},
		{Exit{Unknown: true, OOMKilled: true}, "killed: out of memory"},
	} {
		if got := tc.exit.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.exit, got, tc.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	var r Registry
	if r.Default() != "" || len(r.Names()) != 0 {
		t.Fatal("an empty registry has a default")
	}
	for _, name := range []string{"native", "docker"} {
		if err := r.Register(name, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "Native", "9lives", "a b", "native"} {
		if err := r.Register(bad, nil); err == nil {
			t.Errorf("Register(%q) accepted", bad)
		}
	}
	if r.Default() != "native" || len(r.Names()) != 2 || r.Names()[1] != "docker" {
		t.Fatalf("default %q, names %v", r.Default(), r.Names())
	}
	if _, ok := r.Get("docker"); !ok {
		t.Fatal("docker not found")
	}
	if _, ok := r.Get("vm"); ok {
		t.Fatal("vm found")
	}
}
