package testenv

import (
	"bytes"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections made to Addr to a target and can cut every
// open one at once: a network that drops, for tests of reconnection.
type Proxy struct {
	// Addr is where to connect instead of the target (a host:port, or a
	// socket path for "unix").
	Addr string

	mu    sync.Mutex
	conns []net.Conn
	// cutOn, when set, drops the connection whose request contains it
	// once the target has begun to answer, without passing the answer
	// on: the target did the work, the client never hears of it.
	cutOn []byte
	cut   chan struct{}
}

// CutOn arms a one-shot cut: the next request that contains pattern
// reaches the target, and its connection is closed when the answer
// starts, the answer lost. The channel is closed when that happened.
func (p *Proxy) CutOn(pattern string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOn, p.cut = []byte(pattern), make(chan struct{})
	return p.cut
}

// forward copies one connection both ways, honouring an armed CutOn.
func (p *Proxy) forward(in, out net.Conn) {
	var armed atomic.Bool
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				p.mu.Lock()
				if p.cutOn != nil && bytes.Contains(buf[:n], p.cutOn) {
					p.cutOn = nil
					armed.Store(true)
				}
				p.mu.Unlock()
				if _, werr := out.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		out.Close()
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := out.Read(buf)
			if n > 0 && armed.Load() {
				in.Close()
				out.Close()
				p.mu.Lock()
				close(p.cut)
				p.mu.Unlock()
				return
			}
			if n > 0 {
				if _, werr := in.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		in.Close()
	}()
}

// NewProxy listens on network ("tcp" on loopback, or "unix" in a temp
// dir) and forwards to target; it stops with the test.
func NewProxy(t testing.TB, network, target string) *Proxy {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "proxy.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String()}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial(network, target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.forward(in, out)
		}
	}()
	t.Cleanup(func() { ln.Close(); p.Cut() })
	return p
}

// Cut closes every connection open through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
