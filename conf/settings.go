package conf

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Setting is one configuration key and its value in force, written as in
// the config file.
type Setting struct {
	Key   string // as in the file: "listen", "docker.image", "snapshots.web.command"
	Value string // TOML; a secret's value is hidden
	// Origin says where the value came from: "default", "file",
	// "env NAME" or "flag --NAME".
	Origin string
	// EnvOnly: the setting has no key in the file, only an environment
	// variable (the token, reap_on_exit).
	EnvOnly bool
	cmp     string // what Diff compares (a secret's real value)
}

// hidden stands for a secret's value.
const hidden = `"(hidden)"`

// Settings lists every setting in force, in the file's order: top-level
// keys, then each table's, then each snapshot's. It is the one table of
// keys: Diff and the config command both read it.
func (c Config) Settings() []Setting {
	var out []Setting
	add := func(key string, v any) {
		val := tomlValue(v)
		out = append(out, Setting{Key: key, Value: val, cmp: val})
	}
	for _, k := range keys {
		v := k.show(&c)
		st := Setting{Key: k.path, Value: tomlValue(v), EnvOnly: !k.file}
		st.cmp = st.Value
		if k.secret && st.Value != `""` {
			st.Value = hidden // Diff still compares the real value
		}
		out = append(out, st)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Snapshots)) {
		p := c.Snapshots[name]
		key := "snapshots." + tomlKey(name) + "."
		if p.Runtime != "" { // unset: the daemon's first runtime
			add(key+"runtime", p.Runtime)
		}
		if len(p.Command) > 0 {
			add(key+"command", p.Command)
		}
		if p.Image != "" {
			add(key+"image", p.Image)
		}
		if p.ReadyPath != "" {
			add(key+"ready_path", p.ReadyPath)
		}
		if len(p.Env) > 0 {
			// The values may be secrets: only the keys are shown.
			var b strings.Builder
			b.WriteString("{ ")
			for i, k := range slices.Sorted(maps.Keys(p.Env)) {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(tomlKey(k) + " = " + hidden)
			}
			b.WriteString(" }")
			out = append(out, Setting{Key: key + "env", Value: b.String(), cmp: fmt.Sprint(p.Env)})
		}
		if p.StartupTimeout > 0 {
			add(key+"startup_timeout", p.StartupTimeout)
		}
		if p.StopGrace != nil {
			add(key+"stop_grace", *p.StopGrace)
		}
	}
	for i := range out {
		out[i].Origin = "default"
		if o, ok := c.Origins[out[i].Key]; ok {
			out[i].Origin = o
		}
	}
	return out
}

// tomlValue writes v as a TOML value.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case time.Duration:
		return strconv.Quote(v.String())
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	panic(fmt.Sprintf("conf: no TOML form for %T", v))
}

// tomlKey quotes a key that is not a bare TOML key.
func tomlKey(k string) string {
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(k)
		}
	}
	return k
}

// Diff names the settings that differ between a and b, by their config
// key (a snapshot by "snapshots.NAME"), never with their values (the
// token is a secret).
func Diff(a, b Config) []string {
	as, bs := a.Settings(), b.Settings()
	index := func(settings []Setting) map[string]string {
		m := map[string]string{}
		for _, s := range settings {
			m[s.Key] = s.cmp
		}
		return m
	}
	am, bm := index(as), index(bs)
	var out []string
	seen := map[string]bool{}
	for _, s := range append(as, bs...) {
		av, aok := am[s.Key]
		bv, bok := bm[s.Key]
		if aok == bok && av == bv {
			continue
		}
		key := s.Key
		if rest, ok := strings.CutPrefix(key, "snapshots."); ok {
			// A snapshot changes as one: its name, up to the last dot.
			key = "snapshots." + rest[:strings.LastIndexByte(rest, '.')]
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, key)
		}
	}
	return out
}
