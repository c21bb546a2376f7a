package runtime

import (
	"slices"
	"testing"
	"time"

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

func TestExpandArgv(t *testing.T) {
	env := []string{"PORT=4100", "ARGS=--a  --b", "EMPTY=", "PORT=4200"}
	cases := []struct {
		in, want []string
	}{
		{[]string{"srv", "--port", "${PORT}"}, []string{"srv", "--port", "4200"}}, // the last entry of a key wins
		{[]string{"srv", "--listen=127.0.0.1:${PORT}"}, []string{"srv", "--listen=127.0.0.1:4200"}},
		{[]string{"srv", "$ARGS", "x"}, []string{"srv", "--a", "--b", "x"}},                   // a whole-word $NAME splits
		{[]string{"srv", "${ARGS}"}, []string{"srv", "--a  --b"}},                             // ${NAME} does not
		{[]string{"srv", "$EMPTY", "$UNSET", "${UNSET}"}, []string{"srv", ""}},                // empty words vanish, ${} stays a word
		{[]string{"sh", "-c", "echo $$PORT $PORT"}, []string{"sh", "-c", "echo $PORT $PORT"}}, // only $$ and ${} inside a word
		{[]string{"a$", "${", "${1X}", "${PORT"}, []string{"a$", "${", "${1X}", "${PORT"}},    // not references: as they are
	}
	for _, c := range cases {
		if got := ExpandArgv(c.in, env); !slices.Equal(got, c.want) {
			t.Errorf("ExpandArgv(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// One rule for limits: a value below what can be enforced is refused,
// never read as "no limit"; what is kept is what the kernel enforces.

// OnDone runs each function once, after the end: those given before it
// and those given after.
func TestEndingOnDone(t *testing.T) {
	n := NewEnding()
	ran := make(chan string, 3)
	// Each hook says what it saw: one that ran before the end saw no exit.
	hook := func(name string) func() {
		return func() {
			if e := n.Exit(); e.Code != 3 {
				t.Errorf("%s ran and saw exit %+v, not the end's", name, e)
			}
			ran <- name
		}
	}
	n.OnDone(hook("before"))
	n.OnDone(hook("before too"))
	select {
	case got := <-ran:
		t.Fatalf("%q ran before the end", got)
	default:
	}
	n.End(Exit{Code: 3})
	n.End(Exit{Code: 4}) // a later End runs nothing again
	n.OnDone(hook("after"))
	got := map[string]bool{}
	for range 3 {
		select {
		case s := <-ran:
			got[s] = true
		case <-time.After(time.Minute):
			t.Fatalf("hooks that ran: %v", got)
		}
	}
	select {
	case s := <-ran:
		t.Fatalf("%q ran twice", s)
	case <-time.After(50 * time.Millisecond):
	}
}

// What embedding Ending gives a handle.
var _ interface {
	Done() <-chan struct{}
	OnDone(func())
} = struct{ *Ending }{NewEnding()}
