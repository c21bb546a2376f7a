package supervisor

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
	"github.com/agent-control-plane/agent-control-plane/supervisor/runtime"
	"github.com/agent-control-plane/agent-control-plane/supervisor/securefs"
)

// Volumes are named directories the daemon keeps beside its sandboxes
// (<root>/.volumes/<id>/data, described by volume.json), mounted into
// sandboxes at create where their runtime mounts (a container), shared
// by every sandbox that names them, kept when those are deleted.

// VolumesDir is the root's directory of volumes: a name no sandbox can
// have.
const VolumesDir = ".volumes"

// Bounds of volumes: in all, and mounts per sandbox.
const (
	MaxVolumes      = 100
	MaxVolumeMounts = 8
)

// Volume is one volume.
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// VolumeMount mounts a volume (or its Subpath) at MountPath in a
// sandbox.
type VolumeMount struct {
	VolumeID  string `json:"volumeId"`
	MountPath string `json:"mountPath"`
	Subpath   string `json:"subpath,omitempty"`
}

const volumeFile = "volume.json"

// CreateVolume makes an empty volume called name (ErrConflict when one
// is). It counts toward MaxVolumes.
func (s *Supervisor) CreateVolume(name string) (Volume, error) {
	if !validName(name) {
		return Volume{}, invalid("volume name %q must match %s", Clip(name, MaxQuoted), nameRE)
	}
	s.volMu.Lock()
	defer s.volMu.Unlock()
	all, err := s.volumesLocked()
	if err != nil {
		return Volume{}, err
	}
	if slices.ContainsFunc(all, func(v Volume) bool { return v.Name == name }) {
		return Volume{}, fmt.Errorf("%w: a volume called %s exists", ErrConflict, name)
	}
	if len(all) >= MaxVolumes {
		return Volume{}, fmt.Errorf("%w: %d volumes exist (at most %d); delete one first", ErrBusy, len(all), MaxVolumes)
	}
	v := Volume{ID: "vol-" + strings.ToLower(rand.Text()[:16]), Name: name, CreatedAt: s.clock().UTC()}
	b, _ := json.Marshal(v)
	if err := s.fs.MkdirAll(VolumesDir, 0o700); err != nil {
		return Volume{}, err
	}
	// The description is written last: a directory without one (a
	// create cut short) is no volume, and is left alone.
	dir := VolumesDir + "/" + v.ID
	if err := s.fs.mkdir(dir); err != nil {
		return Volume{}, err
	}
	if err := s.fs.mkdir(dir + "/data"); err != nil {
		return Volume{}, err
	}
	if err := s.fs.writeAtomic(dir, volumeFile, b, securefs.SyncBeforeRename); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// volumesLocked reads every volume (volMu held).
func (s *Supervisor) volumesLocked() ([]Volume, error) {
	ents, err := s.fs.ReadDir(VolumesDir, MaxVolumes+16)
	if err != nil {
		return nil, nil // none made yet
	}
	var out []Volume
	for _, ent := range ents {
		b, err := s.fs.ReadFile(VolumesDir+"/"+ent.Name()+"/"+volumeFile, 4096)
		var v Volume
		if err != nil || json.Unmarshal(b, &v) != nil || v.ID != ent.Name() {
			continue // not one of ours: left alone
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Volume) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Volumes lists the volumes, oldest first.
func (s *Supervisor) Volumes() ([]Volume, error) {
	s.volMu.Lock()
	defer s.volMu.Unlock()
	return s.volumesLocked()
}

// Volume finds a volume by id or name (ErrNotFound).
func (s *Supervisor) Volume(idOrName string) (Volume, error) {
	all, err := s.Volumes()
	if err != nil {
		return Volume{}, err
	}
	return findVolume(all, idOrName)
}

// findVolume is the volume of all with id or name idOrName.
func findVolume(all []Volume, idOrName string) (Volume, error) {
	for _, v := range all {
		if v.ID == idOrName || v.Name == idOrName {
			return v, nil
		}
	}
	return Volume{}, fmt.Errorf("%w: no volume %s", ErrNotFound, Clip(idOrName, MaxQuoted))
}

// DeleteVolume removes a volume and its files; one that a sandbox mounts
// is ErrConflict, naming it.
func (s *Supervisor) DeleteVolume(id string) error {
	v, err := s.Volume(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	var users []string
	for _, e := range s.sandboxes {
		if slices.ContainsFunc(e.info.Volumes, func(m VolumeMount) bool { return m.VolumeID == v.ID }) {
			users = append(users, e.id)
		}
	}
	s.mu.Unlock()
	if len(users) > 0 {
		slices.Sort(users)
		return fmt.Errorf("%w: volume %s is mounted by %s; delete those sandboxes first", ErrConflict, v.Name, strings.Join(users, ", "))
	}
	s.volMu.Lock()
	defer s.volMu.Unlock()
	// The description goes first: what a delete cut short leaves is no
	// volume any more.
	if err := s.fs.Remove(VolumesDir+"/"+v.ID+"/"+volumeFile, false); err != nil {
		return err
	}
	return s.fs.Remove(VolumesDir+"/"+v.ID, true)
}

// checkMounts checks a create's mounts: each volume exists, each mount
// path is absolute, apart from the others and from the workspace, each
// subpath stays inside its volume.
func (s *Supervisor) checkMounts(mounts []VolumeMount) error {
	if len(mounts) > MaxVolumeMounts {
		return field.Errorf(field.Volumes, "has %d mounts; at most %d", len(mounts), MaxVolumeMounts)
	}
	if len(mounts) == 0 {
		return nil
	}
	all, err := s.Volumes() // read once for every mount
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range mounts {
		p := path.Clean(m.MountPath)
		switch {
		case !path.IsAbs(m.MountPath) || p == "/" || strings.ContainsRune(m.MountPath, 0):
			return field.Errorf(field.Volumes, "mountPath %q must be an absolute path other than /", Clip(m.MountPath, MaxQuoted))
		case seen[p]:
			return field.Errorf(field.Volumes, "mountPath %s is given twice", p)
		case m.Subpath != "" && (path.IsAbs(m.Subpath) || !validSubpath(m.Subpath)):
			return field.Errorf(field.Volumes, "subpath %q must be a relative path inside the volume", Clip(m.Subpath, MaxQuoted))
		}
		seen[p] = true
		if _, err := findVolume(all, m.VolumeID); err != nil {
			return field.Errorf(field.Volumes, "%v", err)
		}
	}
	return nil
}

func validSubpath(p string) bool {
	c := path.Clean(p)
	return c != ".." && !strings.HasPrefix(c, "../") && !strings.ContainsRune(p, 0)
}

// mounts are a sandbox's volume mounts as its runtime takes them: each
// volume's directory (or subpath, made if missing) on this machine.
func (s *Supervisor) mounts(vols []VolumeMount) ([]runtime.Mount, error) {
	if len(vols) == 0 {
		return nil, nil // no volume read on a start without mounts
	}
	all, err := s.Volumes()
	if err != nil {
		return nil, err
	}
	var out []runtime.Mount
	for _, m := range vols {
		v, err := findVolume(all, m.VolumeID)
		if err != nil {
			return nil, err
		}
		rel := VolumesDir + "/" + v.ID + "/data"
		if m.Subpath != "" {
			rel += "/" + path.Clean(m.Subpath)
			if err := s.fs.MkdirAll(rel, 0o755); err != nil {
				return nil, fmt.Errorf("volume %s: make %s: %w", v.Name, m.Subpath, err)
			}
		}
		out = append(out, runtime.Mount{Source: s.fs.Abs(rel), Target: path.Clean(m.MountPath)})
	}
	return out, nil
}
