package daytona

import (
	"net/http"

	"github.com/agent-control-plane/agent-control-plane/api/wire"
	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

// Daytona's volumes: named directories the daemon keeps (the
// supervisor's), mounted at create by sandboxes whose runtime mounts.

// VolumeDto is Daytona's VolumeDto.
type VolumeDto struct {
	ID             string  `json:"id"`
	Name           string  `json:"name"`
	OrganizationID string  `json:"organizationId"`
	State          string  `json:"state"`
	CreatedAt      string  `json:"createdAt"`
	UpdatedAt      string  `json:"updatedAt"`
	LastUsedAt     *string `json:"lastUsedAt"`
	ErrorReason    *string `json:"errorReason"`
}

func (a *API) volumeDto(v supervisor.Volume) VolumeDto {
	at := timeText(v.CreatedAt)
	return VolumeDto{ID: v.ID, Name: v.Name, OrganizationID: OrganizationID(a.opts.Root), State: "ready", CreatedAt: at, UpdatedAt: at}
}

func (a *API) volumeRoutes() []Route {
	return []Route{
		{"GET", "/api/volumes", a.listVolumes, false, false, false},
		{"POST", "/api/volumes", a.createVolume, true, false, false},
		{"GET", "/api/volumes/by-name/{name}", a.getVolume, false, false, false},
		{"DELETE", "/api/volumes/{vid}", a.deleteVolume, true, false, false},
		{"GET", "/api/volumes/{vid}", a.getVolume, false, false, false},
	}
}

func (a *API) listVolumes(w http.ResponseWriter, r *http.Request) {
	list, err := a.sup.Volumes()
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	out := []VolumeDto{}
	for _, v := range list {
		out = append(out, a.volumeDto(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) createVolume(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name string `json:"name"`
	}
	if err := wire.DecodeJSON(r, &b); err != nil {
		badRequest(w, r, err.Error())
		return
	}
	v, err := a.sup.CreateVolume(b.Name)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, a.volumeDto(v))
}

// getVolume finds a volume by id (or, by-name, by name: one lookup takes
// both).
func (a *API) getVolume(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("vid")
	if key == "" {
		key = r.PathValue("name")
	}
	v, err := a.sup.Volume(key)
	if err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	writeJSON(w, http.StatusOK, a.volumeDto(v))
}

func (a *API) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := a.sup.DeleteVolume(r.PathValue("vid")); err != nil {
		a.fail(w, r, err, wire.CodeInternal)
		return
	}
	w.WriteHeader(http.StatusOK)
}
