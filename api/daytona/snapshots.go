package daytona

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// SnapshotDto is Daytona's snapshot, as this daemon has them: the
// snapshots of its configuration, each always active, its id its name.
type SnapshotDto struct {
	ID             string   `json:"id"`
	OrganizationID string   `json:"organizationId"`
	General        bool     `json:"general"`
	Name           string   `json:"name"`
	ImageName      string   `json:"imageName,omitempty"`
	Ref            string   `json:"ref,omitempty"`
	State          string   `json:"state"`
	Size           *float64 `json:"size"`
	Entrypoint     []string `json:"entrypoint"`
	CPU            float64  `json:"cpu"`
	GPU            float64  `json:"gpu"`
	Mem            float64  `json:"mem"`
	Disk           float64  `json:"disk"`
	ErrorReason    *string  `json:"errorReason"`
	CreatedAt      string   `json:"createdAt"`
	UpdatedAt      string   `json:"updatedAt"`
	LastUsedAt     *string  `json:"lastUsedAt"`
	RegionIDs      []string `json:"regionIds"`
}

// PaginatedSnapshots is Daytona's page of snapshots.
type PaginatedSnapshots struct {
	Items      []SnapshotDto `json:"items"`
	Total      int           `json:"total"`
	Page       int           `json:"page"`
	TotalPages int           `json:"totalPages"`
}

// snapshotRoutes: the list and one snapshot, from the configuration;
// making, changing or removing one answers what to do instead.
func (a *API) snapshotRoutes() []Route {
	no := unsupported("changing snapshots", "snapshots are configured in the daemon's config file ([snapshots.NAME]); a reload (SIGHUP) applies it")
	out := []Route{
		{"GET", "/api/snapshots", a.listSnapshots, false, false, false},
		{"GET", "/api/snapshots/{id}", a.getSnapshot, false, false, false},
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		out = append(out, Route{m, "/api/snapshots", no, false, false, false}, Route{m, "/api/snapshots/{id}", no, false, false, false})
	}
	for _, m := range refusedMethods {
		out = append(out, Route{m, "/api/snapshots/{id}/{rest...}", unsupported("snapshot builds", "snapshots are not built here: they run a configured command or a local image"), false, false, false})
	}
	return out
}

func (a *API) snapshotDto(s snapshot.Snapshot) SnapshotDto {
	at := timeText(a.opts.Started)
	d := SnapshotDto{ID: s.Name, OrganizationID: a.org, Name: s.Name, State: "active",
		Entrypoint: s.Command, CreatedAt: at, UpdatedAt: at, RegionIDs: []string{Target}}
	if s.Image != "" {
		d.ImageName, d.Ref = s.Image, s.Image
	}
	if d.Entrypoint == nil {
		d.Entrypoint = []string{}
	}
	return d
}

// listSnapshots answers a page of the configured snapshots: name filters
// by a part of the name (any case), sort by name (the only field that
// tells them apart here; the others keep the configuration's order by
// name), order asc or desc.
func (a *API) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, limit := 1, DefaultListLimit
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"page", &page, math.MaxInt32}, {"limit", &limit, MaxListLimit}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n != math.Trunc(n) || n < 1 || n > float64(p.max) {
				badRequest(w, r, fmt.Sprintf("%s must be a whole number from 1 to %d", p.name, p.max))
				return
			}
			*p.dst = int(n)
		}
	}
	switch v := q.Get("sort"); v {
	case "", "name", "state", "lastUsedAt", "createdAt":
	default:
		badRequest(w, r, fmt.Sprintf("sort: %q is not one of name, state, lastUsedAt, createdAt", clip(v)))
		return
	}
	desc := false
	switch v := q.Get("order"); v {
	case "", "desc":
		desc = v == "desc" && q.Get("sort") == "name"
	case "asc":
	default:
		badRequest(w, r, fmt.Sprintf("order: %q is not asc or desc", clip(v)))
		return
	}
	part := strings.ToLower(q.Get("name"))
	var all []SnapshotDto
	for _, s := range a.sup.Snapshots() {
		if strings.Contains(strings.ToLower(s.Name), part) {
			all = append(all, a.snapshotDto(s))
		}
	}
	slices.SortFunc(all, func(x, y SnapshotDto) int { return cmp.Compare(x.Name, y.Name) })
	if desc {
		slices.Reverse(all)
	}
	out := PaginatedSnapshots{Items: []SnapshotDto{}, Total: len(all), Page: page, TotalPages: (len(all) + limit - 1) / limit}
	if from := (page - 1) * limit; from < len(all) {
		out.Items = all[from:min(from+limit, len(all))]
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	for _, s := range a.sup.Snapshots() {
		if s.Name == id {
			writeJSON(w, http.StatusOK, a.snapshotDto(s))
			return
		}
	}
	WriteError(w, r, http.StatusNotFound, fmt.Sprintf("snapshot %q not found; GET /api/snapshots lists those configured", clip(id)))
}
