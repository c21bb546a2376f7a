package supervisor

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/interp"
	"github.com/agent-control-plane/agent-control-plane/supervisor/terminal"
)

// What a caller can make a sandbox keep is bounded: a terminal's
// clients, interpreter contexts, language servers, volumes, the code of
// one run. Each bound is pushed past here.
func TestToolboxBoundsPushedPast(t *testing.T) {
	h := realHarness(t, nil)
	h.create("b1", nil, nil)
	h.waitState("b1", Started)

	term, err := h.sup.OpenTerminal("b1", terminal.Spec{ID: "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range terminal.MaxAttached {
		if _, _, err := term.Attach(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := term.Attach(); err != terminal.ErrFull {
		t.Errorf("an attach past %d: %v", terminal.MaxAttached, err)
	}

	for i := range MaxContextsPerSandbox {
		if _, err := h.sup.CreateContext("b1", ""); err != nil {
			t.Fatalf("context %d: %v", i, err)
		}
	}
	if _, err := h.sup.CreateContext("b1", ""); !isErr(err, ErrBusy) {
		t.Errorf("a context past %d: %v", MaxContextsPerSandbox, err)
	}
	list, _ := h.sup.Contexts("b1")
	if err := h.sup.RunCode(context.Background(), "b1", list[0].ID, strings.Repeat("#", interp.MaxCode+1), nil, 0, func(interp.Message) error { return nil }); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("code past %d bytes: %v", interp.MaxCode, err)
	}

	for i := range MaxVolumes {
		if _, err := h.sup.CreateVolume(fmt.Sprint("v", i)); err != nil {
			t.Fatalf("volume %d: %v", i, err)
		}
	}
	if _, err := h.sup.CreateVolume("one-more"); !isErr(err, ErrBusy) {
		t.Errorf("a volume past %d: %v", MaxVolumes, err)
	}

	if _, err := exec.LookPath("pylsp"); err != nil {
		t.Log("pylsp is not installed: the language servers' bound is not pushed (Debian's python3-pylsp)")
		return
	}
	for i := range MaxLanguageServersPerSandbox {
		if err := h.sup.StartLanguageServer(context.Background(), "b1", "python", t.TempDir()); err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
	}
	if err := h.sup.StartLanguageServer(context.Background(), "b1", "python", t.TempDir()); !isErr(err, ErrBusy) {
		t.Errorf("a language server past %d: %v", MaxLanguageServersPerSandbox, err)
	}
}
