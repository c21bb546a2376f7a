package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/proc/probe"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime/fake"
)

// The watchdog's pings and STATUS lines never wait on metering: with a
// runtime whose usage call blocks (a slow engine) and a scrape's metering
// in flight all along, the pings keep coming, and none of them asked a
// runtime for usage.
//
// It is long because it builds its own blocking meter and watchdog
// socket around the one behaviour it checks.
func TestWatchdogKeepsItsRateWhileUsageBlocks(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	m := fake.NewMachine()
	t.Cleanup(m.Shutdown)
	rt := &fake.Runtime{M: m, LocalPort: true, BlockUsage: block}
	reg := &runtime.Registry{}
	if err := reg.Register("native", rt); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(context.Background(), supervisor.Options{
		Root: t.TempDir(), PortLo: 24600, PortHi: 24700, StopGrace: time.Second, StartupTimeout: time.Minute,
		CheckInterval: time.Hour, ReadyPath: "/", Runtimes: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	for i := range 8 {
		if _, err := sup.Create(context.Background(), supervisor.CreateRequest{Name: fmt.Sprintf("w%d", i)}); err != nil {
			t.Fatal(err)
		}
	}

	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "100000") // a ping every 50 ms
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go notifier{log: slog.New(slog.NewTextHandler(io.Discard, nil))}.ready(ctx, sup)
	buf := make([]byte, 4096)
	ping := func() bool {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no ping: %v", err)
		}
		msg := string(buf[:n])
		if !strings.Contains(msg, "STATUS=8 sandboxes") {
			t.Fatalf("status %q, want the count of 8", msg)
		}
		return strings.Contains(msg, "WATCHDOG=1")
	}

	// The pings ask no runtime anything.
	for pings := 0; pings < 5; {
		if ping() {
			pings++
		}
	}
	if n := rt.UsageCalls.Load(); n != 0 {
		t.Fatalf("the watchdog's pings made %d usage calls", n)
	}

	// A scrape's metering, blocked in the runtime, all along: the pings
	// keep coming.
	var inFlight atomic.Int64
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for ctx.Err() == nil {
			inFlight.Add(1)
			sup.UsageByRuntime(ctx)
			inFlight.Add(-1)
		}
	}()
	// The scrape has reached the runtime.
	reached, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := probe.Readiness.Until(reached, func(context.Context) (bool, error) { return rt.UsageCalls.Load() > 0, nil }); err != nil {
		t.Fatalf("the scrape never asked the runtime: %v", err)
	}
	for pings := 0; pings < 10; {
		if ping() && inFlight.Load() > 0 {
			pings++
		}
	}
	cancel()
	<-scraped
}
