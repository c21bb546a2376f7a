package supervisor

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func next(t *testing.T, sub *Subscription) Event {
	t.Helper()
	select {
	case ev, ok := <-sub.C:
		if !ok {
			t.Fatal("subscription closed")
		}
		return ev
	case <-time.After(60 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func kinds(evs []Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type+":"+ev.Sandbox.ID)
	}
	return out
}

func TestEventsSnapshotThenLiveInOrder(t *testing.T) {
	h := newHarness(t, nil)
	h.create("pre", nil, nil)
	h.waitState("pre", Started)
	sub, first := h.sup.Subscribe(nil, nil)
	defer sub.Close()
	if len(first) != 1 || first[0].Type != EventReplaced || len(first[0].All) != 1 || first[0].All[0].ID != "pre" {
		t.Fatalf("first = %+v", first)
	}
	h.create("live", nil, nil)
	h.waitState("live", Started)
	h.sup.Stop(context.Background(), "live", false)
	h.sup.Delete(context.Background(), "live")
	var got []Event
	for range 4 {
		got = append(got, next(t, sub))
	}
	want := "[sandbox.created:live sandbox.started:live sandbox.stopped:live sandbox.deleted:live]"
	if fmt.Sprint(kinds(got)) != want {
		t.Fatalf("events %v, want %v", kinds(got), want)
	}
	seq := first[0].Seq
	for _, ev := range got {
		if ev.Seq != seq+1 {
			t.Fatalf("seq %d after %d", ev.Seq, seq)
		}
		seq = ev.Seq
	}
	if got[3].Sandbox.State != Destroyed {
		t.Fatalf("deleted event state %s", got[3].Sandbox.State)
	}
}

func TestEventsReplayAndTooOld(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.EventBuffer = 4 })
	sub, first := h.sup.Subscribe(nil, nil)
	h.create("a", nil, nil)
	created := next(t, sub)
	h.waitState("a", Started)
	started := next(t, sub)
	sub.Close()

	// Reconnect after the created event: exactly the later ones, no
	// snapshot.
	sub2, replay := h.sup.Subscribe(nil, &created.Seq)
	defer sub2.Close()
	if len(replay) != 1 || replay[0].Seq != started.Seq || replay[0].Type != EventStarted {
		t.Fatalf("replay %+v", kinds(replay))
	}
	// Up to date: nothing to replay.
	if _, r := h.sup.Subscribe(nil, &started.Seq); len(r) != 0 {
		t.Fatalf("replay from the newest id: %v", kinds(r))
	}
	// Fall out of the 4-event ring: a fresh snapshot instead.
	for i := range 3 {
		h.create(fmt.Sprintf("b%d", i), nil, nil)
	}
	_, r := h.sup.Subscribe(nil, &first[0].Seq)
	if len(r) != 1 || r[0].Type != EventReplaced || len(r[0].All) != 4 {
		t.Fatalf("too-old id gave %v", kinds(r))
	}
	// An id from the future (another daemon's) also gets a snapshot.
	future := r[0].Seq + 1000
	if _, r := h.sup.Subscribe(nil, &future); len(r) != 1 || r[0].Type != EventReplaced {
		t.Fatalf("future id gave %v", kinds(r))
	}
}

func TestEventsLabelFilter(t *testing.T) {
	h := newHarness(t, nil)
	h.create("mine-old", nil, map[string]string{"origin": "cli"})
	sub, first := h.sup.Subscribe(Filter{"origin": "cli"}, nil)
	defer sub.Close()
	if len(first[0].All) != 1 {
		t.Fatalf("filtered snapshot %+v", first[0].All)
	}
	h.create("other", nil, map[string]string{"origin": "web-ui"})
	h.create("mine", nil, map[string]string{"origin": "cli"})
	ev := next(t, sub)
	if ev.Sandbox.ID != "mine" && ev.Sandbox.ID != "mine-old" {
		t.Fatalf("filter let through %s", ev.Sandbox.ID)
	}
	for {
		select {
		case ev := <-sub.C:
			if ev.Sandbox.Labels["origin"] != "cli" {
				t.Fatalf("filter let through %s", ev.Sandbox.ID)
			}
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// A subscriber that never reads is dropped; publishing never waits for it
// and others keep receiving.
func TestStalledSubscriberDropped(t *testing.T) {
	hb := newHub(64, 4, 0)
	stalled, _, _, _ := hb.subscribe(nil, nil)
	live, _, _, _ := hb.subscribe(nil, nil)
	for i := range 50 {
		hb.publish(Event{Type: EventCreated, Sandbox: Sandbox{ID: fmt.Sprint(i)}})
		select {
		case ev := <-live.C:
			if ev.Sandbox.ID != fmt.Sprint(i) {
				t.Fatalf("live got %s, want %d", ev.Sandbox.ID, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("live subscriber starved")
		}
	}
	if !stalled.Dropped() || live.Dropped() {
		t.Fatalf("dropped: stalled %v, live %v", stalled.Dropped(), live.Dropped())
	}
	n := 0
	for range stalled.C {
		n++
	}
	if n != 4 {
		t.Fatalf("stalled subscriber kept %d buffered events, want 4", n)
	}
	if hb.subscribers() != 1 {
		t.Fatalf("subscribers %d", hb.subscribers())
	}
	live.Close()
	live.Close() // idempotent
}

// TestOnQuiet: OnQuiet runs once a burst is over: QuietAfter after the
// burst's last event, not before, and once.
func TestOnQuiet(t *testing.T) {
	calls := make(chan time.Time, 8)
	h := newHarness(t, func(o *Options) { o.OnQuiet = func() { calls <- time.Now() } })
	sub, _ := h.sup.Subscribe(nil, nil)
	defer sub.Close()
	for i := range 3 {
		h.create(fmt.Sprintf("q%d", i), nil, nil)
	}
	var last time.Time
	for started := 0; started < 3; {
		if ev := next(t, sub); ev.Type == EventStarted {
			started++
		}
		last = time.Now()
	}
	select {
	case at := <-calls:
		if at.Sub(last) < QuietAfter-50*time.Millisecond { // the event was read a moment after its publish
			t.Fatalf("OnQuiet ran %v after the burst's last event, before QuietAfter (%v)", at.Sub(last), QuietAfter)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("OnQuiet did not run after the burst")
	}
	h.create("one-more", nil, nil)
	h.waitState("one-more", Started)
	select {
	case <-calls:
	case <-time.After(60 * time.Second):
		t.Fatal("OnQuiet did not run after a second burst")
	}
	if n := len(calls); n != 0 {
		t.Fatalf("OnQuiet ran %d more times", n)
	}
}
