package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

var portBlock = testenv.PortBlock{Base: 29000, Size: 20}

func daemon(t *testing.T) (*testenv.Daemon, *Client) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi})
	return d, New(d.URL, WithToken(d.Token))
}

// With no token given, the client finds it as the daemon made it: in the
// token file under $XDG_STATE_HOME, also when the file appears only after
// the client was made; a wrong token is refused with a hint.
func TestClientFindsTokenFile(t *testing.T) {
	lo, hi := portBlock.Next()
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("AGENT_CONTROL_PLANE_TOKEN", "")
	t.Setenv("AGENT_CONTROL_PLANE_TOKEN_FILE", "")
	url := fmt.Sprintf("http://127.0.0.1:%d", lo)
	c := New(url) // before the daemon and its token file exist
	d := testenv.StartDaemon(t, testenv.Options{Listen: url[len("http://"):], PortLo: lo + 1, PortHi: hi, TokenFile: true, State: state})
	ctx := testenv.Context(t)
	if _, err := c.List(ctx, nil); err != nil {
		t.Fatalf("list with the token from the file: %v", err)
	}
	if d.Token == "" {
		t.Fatal("no token file")
	}
	_, err := New(url, WithToken("wrong-token-0123456789")).List(ctx, nil)
	if !IsCode(err, "unauthorized") {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestClientAgainstDaemon(t *testing.T) {
	_, c := daemon(t)
	ctx := testenv.Context(t)
	info, err := c.Info(ctx)
	if err != nil || info.Name != wire.Name || info.APIVersion != wire.APIVersion {
		t.Fatalf("info %+v %v", info, err)
	}
	sb, err := c.Create(ctx, wire.CreateSandboxRequest{Name: "cl1", Labels: map[string]string{"origin": "cli"}, EnvVars: map[string]string{"STUB_AGENT_PRINT": "hello from cl1"}})
	if err != nil || sb.State != wire.StateStarting {
		t.Fatalf("create %+v %v", sb, err)
	}
	if _, err := c.Create(ctx, wire.CreateSandboxRequest{Name: "cl1"}); !IsCode(err, "name_conflict") {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := c.Create(ctx, wire.CreateSandboxRequest{Name: "bad/name"}); !IsCode(err, "invalid_request") {
		t.Fatalf("bad name: %v", err)
	}
	ready, err := c.WaitForReady(ctx, "cl1")
	if err != nil || ready.State != wire.StateStarted {
		t.Fatalf("wait: %+v %v", ready, err)
	}
	list, err := c.List(ctx, map[string]string{"origin": "cli"})
	if err != nil || len(list) != 1 || list[0].ID != "cl1" {
		t.Fatalf("list %v %v", list, err)
	}
	if list, _ := c.List(ctx, map[string]string{"origin": "web-ui"}); len(list) != 0 {
		t.Fatalf("filtered list %v", list)
	}
	if err := c.RefreshActivity(ctx, "cl1"); err != nil {
		t.Fatal(err)
	}
	if sb, err := c.SetAutostopInterval(ctx, "cl1", 7); err != nil || sb.AutoStopInterval != 7 {
		t.Fatalf("autostop %+v %v", sb, err)
	}
	if u, err := c.PreviewURL(ctx, "cl1"); err != nil || u != ready.PreviewURL {
		t.Fatalf("preview %q %v", u, err)
	}
	testenv.Eventually(t, "logs", func() bool {
		l, err := c.EntrypointLogs(ctx, "cl1", LogsOptions{})
		return err == nil && strings.Contains(l.Stdout, "hello from cl1")
	})
	if sb, err := c.Stop(ctx, "cl1", false); err != nil || sb.State != wire.StateStopped {
		t.Fatalf("stop %+v %v", sb, err)
	}
	if err := c.RefreshActivity(ctx, "cl1"); !IsCode(err, "sandbox_not_running") {
		t.Fatalf("refresh after stop: %v", err)
	}
	if err := c.Delete(ctx, "cl1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "cl1"); !IsCode(err, "not_found") {
		t.Fatalf("get after delete: %v", err)
	}

	// A sandbox that dies while starting is reported with its reason.
	c.Create(ctx, wire.CreateSandboxRequest{Name: "dies", EnvVars: map[string]string{"STUB_AGENT_READY_DELAY_MS": "60000", "STUB_AGENT_EXIT_AFTER_MS": "1"}})
	_, err = c.WaitForReady(ctx, "dies")
	var nre *NotReadyError
	if !errors.As(err, &nre) || !strings.Contains(nre.ErrorReason, "exited_during_startup") {
		t.Fatalf("wait for a dying sandbox: %v", err)
	}
}

func TestDeadDaemonFailsFast(t *testing.T) {
	c := New(fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))
	_, err := c.List(context.Background(), nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "agent-control-plane serve") {
		t.Fatalf("dead daemon: %v", err)
	}
	// A daemon that accepts but never answers hits the call deadline.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	c = New("http://"+ln.Addr().String(), WithTimeout(200*time.Millisecond))
	if _, err := c.Get(context.Background(), "x"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("hung daemon: %v", err)
	}
}

func TestInfoChecksIdentity(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":"something-else"}`)
	}))
	defer other.Close()
	if _, err := New(other.URL).Info(context.Background()); err == nil || !errors.Is(err, ErrNotDaemon) {
		t.Fatalf("foreign server: %v", err)
	}
	nothtml := httptest.NewServer(http.NotFoundHandler())
	defer nothtml.Close()
	if _, err := New(nothtml.URL).Info(context.Background()); err == nil || !errors.Is(err, ErrNotDaemon) {
		t.Fatalf("404 server: %v", err)
	}
	future := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":"agent-control-plane","apiVersion":"2","version":"9"}`)
	}))
	defer future.Close()
	var warned string
	c := New(future.URL)
	c.Warn = func(s string) { warned = s }
	if _, err := c.Info(context.Background()); err != nil || !strings.Contains(warned, "API version 2") {
		t.Fatalf("version mismatch: err %v, warned %q", err, warned)
	}
}

type recorder struct {
	mu   sync.Mutex
	seqs []uint64
	evs  []wire.StreamEvent
}

func (r *recorder) handle(ev wire.StreamEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	if ev.Type != wire.EventReplaced {
		r.seqs = append(r.seqs, ev.Seq)
	}
	return nil
}

func (r *recorder) sandboxSeqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs)
}

// Watch across a forced disconnect delivers every event exactly once.
func TestWatchAcrossDisconnect(t *testing.T) {
	d, c := daemon(t)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	proxy := testenv.NewProxy(t, "tcp", d.Addr)
	viaProxy := New("http://"+proxy.Addr, WithToken(d.Token))

	var direct, proxied recorder
	var wg sync.WaitGroup
	wg.Go(func() { c.Watch(ctx, nil, direct.handle) })
	wg.Go(func() { viaProxy.Watch(ctx, nil, proxied.handle) })
	testenv.Eventually(t, "both snapshots", func() bool {
		direct.mu.Lock()
		proxied.mu.Lock()
		defer direct.mu.Unlock()
		defer proxied.mu.Unlock()
		return len(direct.evs) > 0 && len(proxied.evs) > 0
	})

	c.Create(ctx, wire.CreateSandboxRequest{Name: "w1"})
	c.WaitForReady(ctx, "w1")
	testenv.Eventually(t, "proxied saw w1 start", func() bool { return len(proxied.sandboxSeqs()) >= 2 })
	for round := range 3 {
		proxy.Cut() // the stream drops; events happen while it is down
		name := fmt.Sprintf("w%d", round+2)
		c.Create(ctx, wire.CreateSandboxRequest{Name: name})
		c.WaitForReady(ctx, name)
		c.Stop(ctx, name, true)
	}
	c.Delete(ctx, "w1")
	want := 2 + 3*3 + 2 // w1 created+started, 3×(created, started, stopped), w1 stopped+deleted
	testenv.Eventually(t, "all events on both streams", func() bool {
		return len(direct.sandboxSeqs()) >= want && len(proxied.sandboxSeqs()) >= want
	})
	cancel()
	wg.Wait()
	ds, ps := direct.sandboxSeqs(), proxied.sandboxSeqs()
	if !slices.Equal(ds, ps) {
		t.Fatalf("proxied stream differs from direct one:\ndirect  %v\nproxied %v", ds, ps)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i] != ps[i-1]+1 {
			t.Fatalf("gap or duplicate at %d: %v", i, ps)
		}
	}
	proxied.mu.Lock()
	defer proxied.mu.Unlock()
	if n := len(proxied.evs) - len(proxied.seqs); n != 1 {
		t.Fatalf("proxied stream got %d snapshots, want 1 (later reconnects replay)", n)
	}
}

func TestWatchHandlerErrorStops(t *testing.T) {
	_, c := daemon(t)
	stop := errors.New("enough")
	err := c.Watch(testenv.Context(t), nil, func(wire.StreamEvent) error { return stop })
	if err != stop {
		t.Fatalf("Watch returned %v", err)
	}
	if err := c.Watch(testenv.Context(t), map[string]string{"": "x"}, func(wire.StreamEvent) error { return nil }); !IsCode(err, "invalid_request") {
		t.Fatalf("bad filter: %v", err)
	}
}
