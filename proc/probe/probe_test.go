package probe

import (
	"context"
	"errors"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	b := Backoff{Initial: time.Millisecond, Fast: 2, Factor: 2, Max: 5 * time.Millisecond}
	want := []time.Duration{1, 1, 1, 2, 4, 5, 5}
	for n, w := range want {
		if got := b.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if d := (Backoff{Initial: time.Second}).Delay(100); d != time.Second {
		t.Errorf("a schedule without Max stays at Initial, got %v", d)
	}
	if d := Reconnect.Delay(1000); d != Reconnect.Max {
		t.Errorf("Reconnect.Delay(1000) = %v, want its max", d)
	}
}

func TestUntil(t *testing.T) {
	calls := 0
	err := Backoff{Initial: time.Microsecond}.Until(context.Background(), func(context.Context) (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, calls)
	}
	boom := errors.New("boom")
	if err := Poll.Until(context.Background(), func(context.Context) (bool, error) { return false, boom }); err != boom {
		t.Fatalf("Until returned %v, want the condition's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Poll.Until(ctx, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until on a cancelled context = %v", err)
	}
}

// A real listener that answers 503 to the first three probes, then 200.
func TestAwait(t *testing.T) {
	var probes atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probes.Add(1) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/ready"
	p := NewHTTP(time.Second)
	if p.Ready(context.Background(), url) {
		t.Fatal("a 503 counted as ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Await(ctx, url, Readiness); err != nil {
		t.Fatalf("Await: %v", err)
	}
	if n := probes.Load(); n != 4 {
		t.Fatalf("ready after %d probes, want 4", n)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if err := p.Await(short, "http://127.0.0.1:1/", Readiness); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await on a closed port = %v, want the deadline", err)
	}
}

// The probe's first look: a port nothing listens on is refused without
// a dial; a listening port, or a host given by name, is left to the HTTP
// request.
func TestRefused(t *testing.T) {
	for _, network := range []struct{ net, host string }{{"tcp4", "127.0.0.1"}, {"tcp6", "[::1]"}} {
		ln, err := net.Listen(network.net, network.host+":0")
		if err != nil {
			t.Logf("skipping %s: %v", network.net, err)
			continue
		}
		defer ln.Close()
		closed, err := net.Listen(network.net, network.host+":0")
		if err != nil {
			t.Fatal(err)
		}
		closedURL := "http://" + closed.Addr().String() + "/"
		closed.Close()
		for url, want := range map[string]bool{
			closedURL:                            true,
			"http://" + ln.Addr().String() + "/": false,
			"http://localhost:1/":                false, // a name: the HTTP request resolves it
		} {
			u, err := neturl.Parse(url)
			if err != nil {
				t.Fatal(err)
			}
			if got := refused(u); got != want {
				t.Errorf("refused(%s) = %v, want %v", url, got, want)
			}
		}
		if err := NewHTTP(time.Second).Check(context.Background(), closedURL); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Check of a closed port = %v, want connection refused", err)
		}
	}
}
