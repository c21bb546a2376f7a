package host

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// limitListener caps the connections open at once at n. Past the cap, a
// connection just accepted takes the place of the one that has been quiet
// longest (idle between requests, or opened and silent), which is closed;
// when every connection is busy with a request, it waits for a free slot
// (the accept loop is serial, so that costs one descriptor at most). So
// idle connections, which anyone can open without a credential, cannot
// keep the owner out, and no client can exhaust the daemon's file
// descriptors. Close ends a waiting Accept.
func limitListener(ln net.Listener, n int, quiet *quietConns) net.Listener {
	return &limited{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), quiet: quiet}
}

type limited struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	quiet     *quietConns
}

// recheck is how often a full listener looks again for a connection
// that has gone quiet.
const recheck = 50 * time.Millisecond

func (l *limited) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	var tick *time.Ticker // made only when the listener is full
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
		}
		if l.quiet.closeOne() {
			continue // its Close gave its slot back
		}
		if tick == nil {
			tick = time.NewTicker(recheck)
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
		case <-tick.C:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

func (l *limited) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// quietConns knows which of the server's connections are quiet (idle
// between requests, or new with no request read yet) and since when.
type quietConns struct {
	mu    sync.Mutex
	since map[net.Conn]time.Time
}

func newQuietConns() *quietConns { return &quietConns{since: map[net.Conn]time.Time{}} }

// track follows a connection's state (http.Server.ConnState).
func (q *quietConns) track(c net.Conn, st http.ConnState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch st {
	case http.StateNew, http.StateIdle:
		q.since[c] = time.Now()
	default:
		delete(q.since, c)
	}
}

// closeOne closes the connection quiet for longest, if there is one.
func (q *quietConns) closeOne() bool {
	q.mu.Lock()
	var oldest net.Conn
	var at time.Time
	for c, t := range q.since {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	delete(q.since, oldest)
	q.mu.Unlock()
	if oldest == nil {
		return false
	}
	oldest.Close()
	return true
}
