package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/launchdarkly/eventsource"
	sse "github.com/tmaxmax/go-sse"

	"github.com/agent-control-plane/agent-control-plane/api"
	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/tests/testenv"
)

func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// 100 request bodies that never arrive are cut after the body deadline,
// while /v1/info and create keep working.
func TestStalledBodiesCut(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_BODY_TIMEOUT_MS=1000")
	var conns []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\":", d.Addr, d.Token)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if _, err := d.Info(); err != nil {
		t.Fatalf("info while bodies stall: %v", err)
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"while-stalled"}`); code != 201 {
		t.Fatalf("create while bodies stall: %d %s", code, b)
	}
	// Every stalled connection is closed by the daemon (after an error
	// answer, if any), well after the deadline but long before the
	// connection would time out otherwise.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("stalled connection %d was not closed by the daemon: %v", i, err)
		}
	}
	waitState(t, d, "while-stalled", "started")
}

// Past max_connections, the daemon holds no more descriptors than its
// cap: a new connection takes the place of a silent one; once the idle
// ones go, requests are served.
func TestConnectionCap(t *testing.T) {
	d := startDaemon(t, "AGENT_CONTROL_PLANE_MAX_CONNECTIONS=32")
	pid := d.Cmd.Process.Pid
	base := fdCount(pid)
	var conns []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// base holds the keep-alive connection of the startup probe: 31 more
	// make the cap.
	testenv.Eventually(t, "the daemon to accept up to its cap", func() bool { return fdCount(pid) >= base+31 })
	if n := fdCount(pid); n > base+32+4 {
		t.Fatalf("the daemon holds %d descriptors with 300 connections open and a cap of 32 (base %d)", n, base)
	}
	for _, c := range conns {
		c.Close()
	}
	if _, err := d.Info(); err != nil {
		t.Fatalf("info after the idle connections closed: %v", err)
	}
	testenv.Eventually(t, "descriptors back to their level", func() bool { return fdCount(pid) <= base+4 })
}

// Idle connections anyone may open without a credential cannot keep the
// owner out: 1,030 keep-alive connections that each asked GET /v1/info
// once, and as many that never said a word, are held past the default
// cap of 1,024, and the owner's requests are answered meanwhile (before,
// they waited for the idle connections' 2-minute timeout).
func TestIdleConnectionsDoNotStarveTheOwner(t *testing.T) {
	d := startDaemon(t)
	pid := d.Cmd.Process.Pid
	base := fdCount(pid)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 2060 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			continue // silent
		}
		fmt.Fprintf(c, "GET /v1/info HTTP/1.1\r\nHost: %s\r\n\r\n", d.Addr)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			// Past the cap, a newer connection may have taken the
			// place of this one before its answer: that is the point.
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// The owner, while they are all held open.
	for i := range 5 {
		if code, b := call(t, d, "GET", "/v1/sandboxes", ""); code != 200 {
			t.Fatalf("the owner's request %d: %d %s", i, code, b)
		}
	}
	if code, b := call(t, d, "POST", "/v1/sandboxes", `{"name":"owner"}`); code != 201 {
		t.Fatalf("the owner's create: %d %s", code, b)
	}
	if n := fdCount(pid); n > base+1024+8 {
		t.Fatalf("the daemon holds %d descriptors (base %d, cap 1024)", n, base)
	}
	waitState(t, d, "owner", "started")
}

// sendQueued sums the send queues of the TCP sockets on addr's port
// (/proc/net/tcp: tx_queue).
func sendQueued(t *testing.T, addr string) int64 {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		n, _ := strconv.ParseInt(tx, 16, 64)
		sum += n
	}
	return sum
}

func rssBytes(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// A multi-megabyte list read by 30 clients that stop reading costs the
// daemon far less than 30 copies of it: the answer is written in pages as
// it goes. The full answer equals a cursor walk.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestSlowReadersOfABigList(t *testing.T) {
	lo, hi := portBlock.Next()
	// Children that exit at once: 300 stopped sandboxes, no processes.
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi,
		Env: []string{`AGENT_CONTROL_PLANE_NATIVE_COMMAND=["/bin/true"]`, "AGENT_CONTROL_PLANE_PORT_RANGE=20000-20999"}})
	labels := map[string]string{}
	for i := range 64 {
		labels[fmt.Sprintf("label-%02d", i)] = strings.Repeat(string(rune('a'+i%26)), 512)
	}
	const n = 300
	for i := range n {
		body, _ := json.Marshal(map[string]any{"name": fmt.Sprintf("big%03d", i), "labels": labels})
		if code, b := call(t, d, "POST", "/v1/sandboxes", string(body)); code != 201 {
			t.Fatalf("create %d: %d %s", i, code, b)
		}
	}
	testenv.Eventually(t, "every child exited", func() bool {
		code, b := call(t, d, "GET", "/v1/sandboxes?states=starting,started&limit=1", "")
		return code == 200 && strings.Contains(string(b), `"sandboxes":[]`)
	})
	code, full := call(t, d, "GET", "/v1/sandboxes", "")
	var list struct{ Sandboxes []sandboxInfo }
	if code != 200 || json.Unmarshal(full, &list) != nil || len(list.Sandboxes) != n {
		t.Fatalf("full list: %d, %d sandboxes", code, len(list.Sandboxes))
	}
	var walked []string
	for cursor := ""; ; {
		q := "/v1/sandboxes?limit=97"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		_, b := call(t, d, "GET", q, "")
		var page struct {
			Sandboxes  []sandboxInfo
			NextCursor string
		}
		json.Unmarshal(b, &page)
		for _, sb := range page.Sandboxes {
			walked = append(walked, sb.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	for i, sb := range list.Sandboxes {
		if i >= len(walked) || walked[i] != sb.ID {
			t.Fatalf("the full list and the cursor walk differ at %d", i)
		}
	}
	size := int64(len(full))
	pid := d.Cmd.Process.Pid
	before := rssBytes(t, pid)
	var conns []net.Conn
	for range 30 {
		c, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/sandboxes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", d.Addr, d.Token)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Wait until the daemon has written all it can: its sockets' send
	// queues are full and stay so.
	var grown int64
	last := int64(-1)
	testenv.Eventually(t, "the daemon's send queues full", func() bool {
		grown = max(grown, rssBytes(t, pid)-before)
		q := sendQueued(t, d.Addr)
		settled := q > 0 && q == last
		last = q
		time.Sleep(50 * time.Millisecond) // the interval over which the queue must not move
		return settled
	})
	t.Logf("list of %d bytes, 30 stalled readers: RSS %d → +%d bytes", size, before, grown)
	if grown > 3*size {
		t.Fatalf("30 stalled readers of a %d-byte list grew the daemon by %d bytes (more than 3 copies)", size, grown)
	}
}

// A daemon holding 800 sandboxes streams its snapshot as one
// sandboxes_replaced event whose lines are all at most 16 KiB. Independent
// SSE clients join its data lines into the JSON of all 800: LaunchDarkly's
// eventsource with its default settings, and tmaxmax/go-sse; so does the Go
// client.
//
// go-sse's default buffer, like r3labs/sse's, bounds a whole event (64 KB),
// not a line, so it is raised here: a snapshot of 800 sandboxes is about
// 400 KB however it is split into lines.
//
// It is long because it is one scenario whose steps build on each other:
// split, each part would need the state the one before left.
func TestSSEAt800Sandboxes(t *testing.T) {
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi,
		Env: []string{`AGENT_CONTROL_PLANE_NATIVE_COMMAND=["/bin/true"]`}})
	const n = 800
	for i := range n {
		body := fmt.Sprintf(`{"name":"sse%03d","labels":{"origin":"web-ui","note":"<tag> & \"quoted\" \u00e9"}}`, i)
		if code, b := call(t, d, "POST", "/v1/sandboxes", body); code != 201 {
			t.Fatalf("create %d: %d %s", i, code, b)
		}
	}
	req, _ := http.NewRequest("GET", d.URL+"/v1/events", nil)
	res, err := d.HTTP(0).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	// Read the raw stream up to the end of the first event, checking lines.
	br := bufio.NewReader(res.Body)
	var raw strings.Builder
	for blank := 0; blank < 2; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if len(line) > api.MaxSSELine+1 {
			t.Fatalf("a line of %d bytes", len(line))
		}
		raw.WriteString(line)
		if line == "\n" {
			blank++ // the retry field's event, then the snapshot
		}
	}
	for ev, err := range sse.Read(strings.NewReader(raw.String()), &sse.ReadConfig{MaxEventSize: 4 << 20}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != "sandboxes_replaced" {
			continue
		}
		var snap wire.StreamEvent
		if err := json.Unmarshal([]byte(ev.Data), &snap); err != nil || len(snap.Sandboxes) != n || snap.Sandboxes[n-1].Labels["note"] != "<tag> & \"quoted\" é" {
			t.Fatalf("go-sse's snapshot: %v, %d sandboxes", err, len(snap.Sandboxes))
		}
		break
	}
	ldReq, _ := http.NewRequest("GET", d.URL+"/v1/events", nil)
	ldReq.Header.Set("Authorization", "Bearer "+d.Token)
	stream, err := eventsource.SubscribeWithRequest("", ldReq)
	if err != nil {
		t.Fatal(err)
	}
	for got := false; !got; {
		select {
		case ev := <-stream.Events:
			if ev.Event() != "sandboxes_replaced" {
				continue // it also hands over the retry field's empty event
			}
			var snap wire.StreamEvent
			if err := json.Unmarshal([]byte(ev.Data()), &snap); err != nil || len(snap.Sandboxes) != n {
				t.Fatalf("LaunchDarkly eventsource's snapshot: %v, %d sandboxes", err, len(snap.Sandboxes))
			}
			got = true
		case err := <-stream.Errors:
			t.Fatalf("LaunchDarkly eventsource: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("LaunchDarkly eventsource read no snapshot")
		}
	}
	stream.Close()
	c := client.New(d.URL, client.WithToken(d.Token))
	got := 0
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	c.Watch(ctx, nil, func(ev wire.StreamEvent) error {
		got = len(ev.Sandboxes)
		cancel()
		return nil
	})
	if got != n {
		t.Fatalf("the Go client's snapshot holds %d sandboxes", got)
	}
}

// A native child writes its log files itself, so while no daemon runs
// nothing caps them (README: Files on disk); the restarted daemon cuts
// each one back to its cap before it serves, and what an interrupted
// rotation left is gone.
func TestLogsCutBackAfterTheDaemonWasAway(t *testing.T) {
	const capBytes = 64 << 10
	lo, hi := portBlock.Next()
	d := testenv.StartDaemon(t, testenv.Options{PortLo: lo, PortHi: hi, Env: []string{"AGENT_CONTROL_PLANE_LOG_MAX_BYTES=" + strconv.Itoa(capBytes)}})
	create(t, d, `{"name":"chatty"}`)
	waitState(t, d, "chatty", "started")
	d.Kill()
	// The child's writes while the daemon is away (appended to the same
	// file, as the child's O_APPEND descriptor does).
	logPath := filepath.Join(d.Root, "chatty", "stdout.log")
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1023) + "\n"
	for i := 0; i < 8<<10; i++ { // 8 MiB
		f.WriteString(line)
	}
	f.Close()
	d.Start()
	waitState(t, d, "chatty", "started")
	testenv.Eventually(t, "the log cut back to its cap", func() bool {
		var total int64
		for _, p := range []string{logPath, logPath + ".1"} {
			if fi, err := os.Stat(p); err == nil {
				total += diskBytes(fi)
			}
		}
		return total <= capBytes+64<<10 // one rotation's slack: a block and a line
	})
}

// diskBytes is what a file takes on disk (a punched head takes none).
func diskBytes(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
