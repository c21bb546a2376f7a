package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// Daytona's page bounds (listSandboxes' limit).
const (
	DefaultListLimit = 100
	MaxListLimit     = 200
)

// listQuery is a decoded listSandboxes query: what the supervisor filters
// (labels, and states where Daytona's and the daemon's agree) and the
// rest, applied to each sandbox as Daytona shows it.
type listQuery struct {
	opts  supervisor.ListOptions
	match []func(SandboxListItem) bool
}

// parseList decodes a listSandboxes query: the page, then each kind of
// filter Daytona's document has, then the order it asks for.
func parseList(q url.Values) (listQuery, error) {
	lq := listQuery{opts: supervisor.ListOptions{Limit: DefaultListLimit}}
	for _, parse := range []func(url.Values) error{lq.page, lq.states, lq.prefixes, lq.oneOf, lq.flags, lq.bounds, lq.times, checkOrder} {
		if err := parse(q); err != nil {
			return lq, err
		}
	}
	return lq, nil
}

// page reads the page's size and where it starts, and the labels the
// supervisor filters on.
func (lq *listQuery) page(q url.Values) error {
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n != float64(int(n)) || n < 1 || n > MaxListLimit {
			return fmt.Errorf("limit must be a whole number from 1 to %d", MaxListLimit)
		}
		lq.opts.Limit = int(n)
	}
	if v := q.Get("cursor"); v != "" {
		c, err := supervisor.ParseCursor(v)
		if err != nil {
			return err
		}
		lq.opts.After = &c
	}
	if v := q.Get("labels"); v != "" {
		var m map[string]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return errors.New(`labels must be a JSON object of strings, e.g. {"origin":"cli"}`)
		}
		if err := supervisor.ValidateLabels(m); err != nil {
			return err
		}
		lq.opts.Labels = m
	}
	return nil
}

// states keeps the sandboxes in the states given; the supervisor narrows
// first where its states and Daytona's agree.
func (lq *listQuery) states(q url.Values) error {
	if states := q["states"]; len(states) > 0 {
		for _, st := range states {
			if !slices.Contains(States, st) {
				return fmt.Errorf("states: %q is not one of Daytona's sandbox states", st)
			}
		}
		lq.match = append(lq.match, func(it SandboxListItem) bool { return slices.Contains(states, it.State) })
		// The supervisor narrows first: error and stopped are both its
		// stopped.
		for _, st := range states {
			var s supervisor.State
			switch st {
			case StateStarting:
				s = supervisor.Starting
			case StateStarted:
				s = supervisor.Started
			case StateStopped, StateError, StateArchived:
				s = supervisor.Stopped
			default:
				continue
			}
			if !slices.Contains(lq.opts.States, s) {
				lq.opts.States = append(lq.opts.States, s)
			}
		}
		if len(lq.opts.States) == 0 { // only states no sandbox here is ever in
			lq.opts.Limit = -1
		}
	}
	return nil
}

// prefixes keeps the sandboxes whose id or name starts as given (any case).
func (lq *listQuery) prefixes(q url.Values) error {
	for _, p := range []struct {
		name string
		of   func(SandboxListItem) string
	}{{"id", func(it SandboxListItem) string { return it.ID }}, {"name", func(it SandboxListItem) string { return it.Name }}} {
		if v := strings.ToLower(q.Get(p.name)); v != "" {
			lq.match = append(lq.match, func(it SandboxListItem) bool { return strings.HasPrefix(strings.ToLower(p.of(it)), v) })
		}
	}
	return nil
}

// oneOf keeps the sandboxes whose snapshot, region or class is one of those given.
func (lq *listQuery) oneOf(q url.Values) error {
	for _, f := range []struct {
		name string
		of   func(SandboxListItem) string
	}{
		{"snapshots", func(it SandboxListItem) string { return it.Snapshot }},
		{"regionIds", func(it SandboxListItem) string { return it.Target }},
		{"sandboxClasses", func(SandboxListItem) string { return "" }}, // none here has a class
	} {
		if vals := q[f.name]; len(vals) > 0 {
			lq.match = append(lq.match, func(it SandboxListItem) bool { return slices.Contains(vals, f.of(it)) })
		}
	}
	return nil
}

// flags keeps the sandboxes public, or recoverable, as asked.
func (lq *listQuery) flags(q url.Values) error {
	for _, f := range []struct {
		name string
		of   func(SandboxListItem) bool
	}{
		{"isPublic", func(it SandboxListItem) bool { return it.Public }},
		{"isRecoverable", func(it SandboxListItem) bool { return it.Recoverable != nil && *it.Recoverable }},
	} {
		if v := q.Get(f.name); v != "" {
			want, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s must be true or false", f.name)
			}
			lq.match = append(lq.match, func(it SandboxListItem) bool { return f.of(it) == want })
		}
	}
	return nil
}

// bounds keeps the sandboxes whose cpu, memory or disk is within the bounds given.
func (lq *listQuery) bounds(q url.Values) error {
	for _, f := range []struct {
		name  string
		of    func(SandboxListItem) float64
		below bool
	}{
		{"minCpu", func(it SandboxListItem) float64 { return it.CPU }, false},
		{"maxCpu", func(it SandboxListItem) float64 { return it.CPU }, true},
		{"minMemoryGiB", func(it SandboxListItem) float64 { return it.Memory }, false},
		{"maxMemoryGiB", func(it SandboxListItem) float64 { return it.Memory }, true},
		{"minDiskGiB", func(it SandboxListItem) float64 { return it.Disk }, false},
		{"maxDiskGiB", func(it SandboxListItem) float64 { return it.Disk }, true},
	} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || !(n >= 1) || math.IsInf(n, 1) { // NaN is not ≥ 1
				return fmt.Errorf("%s must be a number ≥ 1", f.name)
			}
			lq.match = append(lq.match, func(it SandboxListItem) bool {
				if f.below {
					return f.of(it) <= n
				}
				return f.of(it) >= n
			})
		}
	}
	return nil
}

// times keeps the sandboxes created, or changed last, before or after the times given.
func (lq *listQuery) times(q url.Values) error {
	for _, f := range []struct {
		name   string
		of     func(SandboxListItem) string
		before bool
	}{
		{"createdAtAfter", func(it SandboxListItem) string { return it.CreatedAt }, false},
		{"createdAtBefore", func(it SandboxListItem) string { return it.CreatedAt }, true},
		{"lastEventAfter", func(it SandboxListItem) string { return it.UpdatedAt }, false},
		{"lastEventBefore", func(it SandboxListItem) string { return it.UpdatedAt }, true},
	} {
		if v := q.Get(f.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("%s must be a date-time such as 2024-01-01T00:00:00Z", f.name)
			}
			lq.match = append(lq.match, func(it SandboxListItem) bool {
				at, _ := time.Parse(time.RFC3339Nano, f.of(it))
				return f.before == at.Before(t)
			})
		}
	}
	return nil
}

// checkOrder refuses an order other than the one sandboxes are listed in.
func checkOrder(q url.Values) error {
	if v := q.Get("sort"); v != "" && v != "createdAt" {
		return fmt.Errorf("sort: %q is not supported here; sandboxes are listed in creation order (sort=createdAt)", v)
	}
	if v := q.Get("order"); v != "" && v != "asc" {
		return fmt.Errorf("order: %q is not supported here; sandboxes are listed oldest first (order=asc)", v)
	}
	if v := q.Get("includeErroredDeleted"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return errors.New("includeErroredDeleted must be true or false")
		}
	}
	return nil
}

// list answers one page. Filters the supervisor cannot apply are applied
// here as the registry is walked: a page may hold fewer than limit items
// while nextCursor says more may follow, as any cursor list may.
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	lq, err := parseList(r.URL.Query())
	if err != nil {
		badRequest(w, r, err.Error())
		return
	}
	out := ListSandboxesResponse{Items: []SandboxListItem{}}
	if lq.opts.Limit < 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	limit, base := lq.opts.Limit, toolboxBase(r)
	for len(out.Items) < limit {
		page, more := a.sup.ListPage(lq.opts)
		for i, sb := range page {
			it := a.item(sb, base)
			if !lq.matches(it) {
				continue
			}
			out.Items = append(out.Items, it)
			if len(out.Items) == limit {
				if more || i < len(page)-1 {
					c := supervisor.CursorOf(sb).String()
					out.NextCursor = &c
				}
				break
			}
		}
		if !more || len(out.Items) == limit {
			break
		}
		c := supervisor.CursorOf(page[len(page)-1])
		lq.opts.After = &c
	}
	writeJSON(w, http.StatusOK, out)
}

func (lq listQuery) matches(it SandboxListItem) bool {
	for _, m := range lq.match {
		if !m(it) {
			return false
		}
	}
	return true
}
