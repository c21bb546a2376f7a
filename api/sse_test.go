package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/api/client"
	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

type sseEvent struct {
	id, event string
	data      wire.StreamEvent
	raw       []byte
}

type sseStream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
}

func (e *env) watch(query, lastID string) *sseStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/events"+query, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := authClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseStream{t: e.t, resp: resp, cancel: cancel, events: make(chan sseEvent, 1000)}
	go s.read()
	e.t.Cleanup(s.close)
	return s
}

func (s *sseStream) read() {
	defer close(s.events)
	er := client.NewEventReader(s.resp.Body)
	for {
		ev, err := er.Next()
		if err != nil {
			return
		}
		cur := sseEvent{id: ev.ID, event: ev.Type, raw: ev.Data}
		json.Unmarshal(ev.Data, &cur.data)
		s.events <- cur
	}
}

func (s *sseStream) close() { s.cancel(); s.resp.Body.Close() }

func (s *sseStream) next() sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatal("stream ended")
		}
		return ev
	case <-time.After(60 * time.Second):
		s.t.Fatal("no event")
	}
	return sseEvent{}
}

// nextFor skips events about other sandboxes.
func (s *sseStream) nextFor(id string) sseEvent {
	s.t.Helper()
	for {
		ev := s.next()
		if ev.data.Sandbox != nil && ev.data.Sandbox.ID == id {
			return ev
		}
	}
}

func TestSSE(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"pre","labels":{"origin":"cli"}}`)
	w := e.watch("", "")
	filtered := e.watch("?label.origin=web-ui", "")

	snap := w.next()
	if snap.event != "sandboxes_replaced" || len(snap.data.Sandboxes) != 1 || snap.id != fmt.Sprint(snap.data.Seq) {
		t.Fatalf("first event %+v", snap)
	}
	// One "sandboxes" key: a strict parser must not read an empty list
	// before the real one.
	if n := strings.Count(string(snap.raw), `"sandboxes":`); n != 1 {
		t.Fatalf("the snapshot has %d sandboxes keys: %s", n, snap.raw)
	}
	if fs := filtered.next(); fs.event != "sandboxes_replaced" || len(fs.data.Sandboxes) != 0 {
		t.Fatalf("filtered snapshot %+v", fs)
	}

	// A client that connects and never reads must not hold anyone up.
	stalled, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

	e.do("POST", "/v1/sandboxes", `{"name":"ui1","labels":{"origin":"web-ui"}}`)
	e.waitState("ui1", "started")
	e.do("POST", "/v1/sandboxes/ui1/stop", "")
	var got []sseEvent
	for range 3 {
		got = append(got, w.nextFor("ui1"))
	}
	for i, want := range []string{"sandbox.created", "sandbox.started", "sandbox.stopped"} {
		if got[i].event != want || got[i].data.Type != want {
			t.Fatalf("event %d: %s, want %s", i, got[i].event, want)
		}
	}
	if fe := filtered.next(); fe.event != "sandbox.created" || fe.data.Sandbox.ID != "ui1" {
		t.Fatalf("filtered stream got %+v", fe)
	}

	// Reconnect with Last-Event-ID after "created": started and stopped
	// are replayed, nothing else first.
	w.close()
	again := e.watch("", got[0].id)
	r1, r2 := again.nextFor("ui1"), again.nextFor("ui1")
	if r1.id != got[1].id || r2.id != got[2].id {
		t.Fatalf("replay %s,%s want %s,%s", r1.id, r2.id, got[1].id, got[2].id)
	}
	// Garbage ids get a snapshot.
	if ev := e.watch("", "not-a-number").next(); ev.event != "sandboxes_replaced" {
		t.Fatalf("garbage Last-Event-ID gave %s", ev.event)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	e := newEnv(t, nil)
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/events", nil)
	resp, err := authClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	deadline := time.Now().Add(60 * time.Second)
	for sc.Scan() && time.Now().Before(deadline) {
		if strings.HasPrefix(sc.Text(), ": keep-alive") {
			return
		}
	}
	t.Fatal("no heartbeat comment on an idle stream")
}

// No data line is longer than MaxSSELine, even for a sandbox whose every
// label is as long as allowed and made of characters JSON escapes six
// times over; joined with newlines, the lines are the JSON again.
func TestSSEDataLinesBounded(t *testing.T) {
	labels := map[string]string{}
	for i := range supervisor.MaxLabels {
		labels[fmt.Sprintf("%s%03d", strings.Repeat("<", supervisor.MaxLabelKeyLen-3), i)] = strings.Repeat("\x01", supervisor.MaxLabelValueLen)
	}
	var all []supervisor.Sandbox
	for i := range 20 {
		all = append(all, supervisor.Sandbox{ID: fmt.Sprintf("s%d", i), State: supervisor.Started, Labels: labels})
	}
	ev := supervisor.Event{Type: supervisor.EventReplaced, Seq: 7, All: all}
	var buf strings.Builder
	if err := writeSnapshot(&buf, ev); err != nil {
		t.Fatal(err)
	}
	one := formatEvent(supervisor.Event{Type: supervisor.EventCreated, Seq: 8, Sandbox: all[0]})
	for _, stream := range []string{buf.String(), string(one)} {
		for _, line := range strings.Split(stream, "\n") {
			if len(line) > MaxSSELine {
				t.Fatalf("a line of %d bytes", len(line))
			}
		}
		ev, err := client.NewEventReader(strings.NewReader(stream)).Next()
		if err != nil {
			t.Fatal(err)
		}
		var decoded wire.StreamEvent
		if err := json.Unmarshal(ev.Data, &decoded); err != nil {
			t.Fatalf("the data lines joined are not JSON: %v", err)
		}
		if decoded.Sandbox == nil && (len(decoded.Sandboxes) != 20 || decoded.Sandboxes[3].Labels[fmt.Sprintf("%s%03d", strings.Repeat("<", supervisor.MaxLabelKeyLen-3), 5)] != labels[fmt.Sprintf("%s%03d", strings.Repeat("<", supervisor.MaxLabelKeyLen-3), 5)]) {
			t.Fatalf("snapshot decoded wrong: %d sandboxes", len(decoded.Sandboxes))
		}
	}
}

// A followed log whose every byte JSON escapes six times over still comes
// in lines within MaxSSELine, whole once joined, and ends with the
// sandbox once it no longer runs.
func TestFollowLogsLinesBounded(t *testing.T) {
	e := newEnv(t, nil)
	noisy := strings.Repeat("\x01", 10000)
	if r := e.do("POST", "/v1/sandboxes", `{"name":"noisy","envVars":{"STUB_AGENT_PRINT":"`+strings.Repeat(`\u0001`, 10000)+`"}}`); r.code != 201 {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	e.waitState("noisy", "started")
	if r := e.do("POST", "/v1/sandboxes/noisy/stop", ""); r.code != 200 {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	r := e.do("GET", "/v1/sandboxes/noisy/entrypoint-logs?follow=true", "")
	if r.code != 200 || r.hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("follow: %d %s", r.code, r.hdr.Get("Content-Type"))
	}
	for _, line := range strings.Split(string(r.body), "\n") {
		if len(line) > MaxSSELine {
			t.Fatalf("a line of %d bytes", len(line))
		}
	}
	er := client.NewEventReader(strings.NewReader(string(r.body)))
	var stdout strings.Builder
	for {
		ev, err := er.Next()
		if err != nil {
			t.Fatalf("the stream ended without an end event: %v", err)
		}
		if ev.Type == wire.LogEventEnd {
			var sb wire.SandboxInfo
			if json.Unmarshal(ev.Data, &sb) != nil || sb.State != "stopped" {
				t.Fatalf("end: %s", ev.Data)
			}
			break
		}
		var c wire.LogChunk
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "stdout" {
			stdout.WriteString(c.Text)
		}
	}
	if !strings.Contains(stdout.String(), noisy+"\n") {
		t.Fatalf("the long line did not come whole: %d bytes of stdout", stdout.Len())
	}
}
