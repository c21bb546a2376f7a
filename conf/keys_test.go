package conf

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

// The file's shape and the key table name the same keys: a key added to
// one and not the other fails here, not in a user's config.
func TestKeysMatchTheFile(t *testing.T) {
	var fromFile []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, ty reflect.Type) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "snapshots" {
				continue // per-snapshot keys are the snapshots' own
			}
			if f.Type.Kind() == reflect.Struct {
				walk(prefix+name+".", f.Type)
				continue
			}
			fromFile = append(fromFile, prefix+name)
		}
	}
	walk("", reflect.TypeOf(fileConfig{}))
	var fromTable []string
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.path] {
			t.Errorf("key %s declared twice", k.path)
		}
		seen[k.path] = true
		if k.file {
			fromTable = append(fromTable, k.path)
		}
		if (k.env != "" || k.flag != "") && k.parse == nil {
			t.Errorf("key %s has a variable or a flag but no parse", k.path)
		}
		if k.flag != "" && k.usage == "" {
			t.Errorf("flag --%s has no help", k.flag)
		}
	}
	slices.Sort(fromFile)
	slices.Sort(fromTable)
	if !slices.Equal(fromFile, fromTable) {
		t.Errorf("the file's keys\n%v\nthe table's file keys\n%v", fromFile, fromTable)
	}
}

// What SIGHUP applies (serve's reload) is what the table says reloads.
func TestReloadable(t *testing.T) {
	var got []string
	for _, k := range keys {
		if Reloadable(k.path) {
			got = append(got, k.path)
		}
	}
	want := []string{"autostop_minutes", "max_lifetime", "log_level", "token", "token_file", "native.command"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("reloadable keys %v, want %v", got, want)
	}
	if !Reloadable("snapshots.web.command") || Reloadable("listen") {
		t.Error("a snapshot's keys reload, listen does not")
	}
}

// A snapshot that names no runtime shows none (not runtime = ""): it runs
// on the daemon's first.
func TestSnapshotWithoutRuntimeShowsNone(t *testing.T) {
	c := Default(func(string) string { return "" })
	c.Snapshots = map[string]snapshot.Snapshot{"web": {Name: "web", Command: []string{"x"}}}
	for _, s := range c.Settings() {
		if s.Key == "snapshots.web.runtime" {
			t.Errorf("shown: %s = %s", s.Key, s.Value)
		}
	}
	c.Snapshots["web"] = snapshot.Snapshot{Name: "web", Runtime: "docker", Image: "i"}
	found := false
	for _, s := range c.Settings() {
		found = found || s.Key == "snapshots.web.runtime" && s.Value == `"docker"`
	}
	if !found {
		t.Error("a snapshot's runtime is not shown")
	}
}
