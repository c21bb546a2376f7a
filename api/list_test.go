package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

func (e *env) list(query string) (wire.ListResponse, resp) {
	e.t.Helper()
	r := e.do("GET", "/v1/sandboxes"+query, "")
	var out wire.ListResponse
	if r.code == 200 {
		if err := json.Unmarshal(r.body, &out); err != nil {
			e.t.Fatalf("list%s: %v\n%s", query, err, r.body)
		}
	}
	return out, r
}

func ids(l []wire.SandboxInfo) []string {
	var out []string
	for _, sb := range l {
		out = append(out, sb.ID)
	}
	return out
}

// states= and label=k=v filter; bad values are 400 with a clear message.
func TestListFilters(t *testing.T) {
	e := newEnv(t, nil)
	e.do("POST", "/v1/sandboxes", `{"name":"a","labels":{"team":"x"}}`)
	e.do("POST", "/v1/sandboxes", `{"name":"b","labels":{"team":"y"}}`)
	e.do("POST", "/v1/sandboxes", `{"name":"c","labels":{"team":"x"}}`)
	e.waitState("a", "started")
	e.waitState("b", "started")
	e.waitState("c", "started")
	e.do("POST", "/v1/sandboxes/b/stop", "")
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"?states=stopped", []string{"b"}},
		{"?states=started", []string{"a", "c"}},
		{"?states=started,stopped", []string{"a", "b", "c"}},
		{"?states=started&states=stopped", []string{"a", "b", "c"}},
		{"?states=starting", nil},
		{"?label=team%3Dx", []string{"a", "c"}},
		{"?label=team%3Dx&states=stopped", nil},
		{"?label.team=y", []string{"b"}},
		{"?label=team%3Dx&label.team=x", []string{"a", "c"}},
	} {
		out, r := e.list(c.query)
		if r.code != 200 || !slices.Equal(ids(out.Sandboxes), c.want) {
			t.Errorf("%s: %d %v, want %v", c.query, r.code, ids(out.Sandboxes), c.want)
		}
	}
	for _, bad := range []string{"?states=running", "?states=started,", "?limit=0", "?limit=1001", "?limit=x",
		"?cursor=nope", "?label=novalue", "?label=team%3Dx&label=team%3Dy", "?cursor=" + url.QueryEscape(strings.Repeat("A", 300))} {
		if _, r := e.list(bad); r.code != 400 || r.errCode() != "invalid_request" {
			t.Errorf("%s: %d %s, want 400 invalid_request", bad, r.code, r.body)
		}
	}
}

// A cursor walk returns every sandbox that exists throughout exactly once,
// while creates and deletes run; the full list (streamed in pages) agrees
// with a walk.
func TestListCursorWalk(t *testing.T) {
	e := newEnv(t, func(o *supervisor.Options) { o.PortHi = o.PortLo + 39 })
	var stable []string
	for i := range 12 {
		id := fmt.Sprintf("s%02d", i)
		e.do("POST", "/v1/sandboxes", `{"name":"`+id+`"}`)
		stable = append(stable, id)
	}
	// Churn: creates and deletes of other sandboxes during the walks.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("churn%03d", i%20)
			e.do("POST", "/v1/sandboxes", `{"name":"`+id+`"}`)
			e.do("DELETE", "/v1/sandboxes/"+id, "")
		}
	})
	for range 5 {
		seen := map[string]int{}
		cursor := ""
		for pages := 0; ; pages++ {
			q := "?limit=3"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			out, r := e.list(q)
			if r.code != 200 || len(out.Sandboxes) > 3 || pages > 100 {
				t.Fatalf("page %d: %d %s", pages, r.code, r.body)
			}
			for _, sb := range out.Sandboxes {
				seen[sb.ID]++
			}
			if out.NextCursor == "" {
				break
			}
			cursor = out.NextCursor
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("%s seen %d times in one walk", id, n)
			}
		}
		for _, id := range stable {
			if seen[id] != 1 {
				t.Fatalf("%s missing from a walk: %v", id, seen)
			}
		}
	}
	close(stop)
	wg.Wait()
	full, r := e.list("")
	if r.code != 200 {
		t.Fatal(r.code)
	}
	got := ids(full.Sandboxes)
	for _, id := range stable {
		if !slices.Contains(got, id) {
			t.Fatalf("%s missing from the full list %v", id, got)
		}
	}
	if !slices.IsSorted(got[:len(stable)]) {
		t.Fatalf("full list out of order: %v", got)
	}
}

// Error messages quote at most about 100 bytes of what a caller sent.
func TestErrorsQuoteLittleInput(t *testing.T) {
	e := newEnv(t, nil)
	long := strings.Repeat("x", 10000)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + long, ""},
		{"POST", "/v1/sandboxes/" + long + "/stop", ""},
		{"GET", "/v1/" + long, ""},
		{"GET", "/v1/sandboxes?label." + long + "=1&label." + long + "=2", ""},
		{"GET", "/v1/sandboxes?states=" + long, ""},
		{"POST", "/v1/sandboxes", `{"name":"` + long + `"}`},
		{"POST", "/v1/sandboxes", `{"name":"ok","envVars":{"` + long + `":"v"}}`},
	} {
		r := e.do(c.method, c.path, c.body)
		var body wire.ErrorBody
		if json.Unmarshal(r.body, &body) != nil || body.Error.Code == "" {
			t.Fatalf("%s %.40s: not an error answer: %d %.200s", c.method, c.path, r.code, r.body)
		}
		if n := len(body.Error.Message); n > 300 {
			t.Errorf("%s %.40s: a %d-byte message quotes too much: %.200s…", c.method, c.path, n, body.Error.Message)
		}
	}
}
