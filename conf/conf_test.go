package conf

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-control-plane/agent-control-plane/supervisor/snapshot"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.toml")
	os.WriteFile(file, []byte(`
listen = "127.0.0.1:5000"
root = "/file/root"
port_range = "6000-6099"
stop_grace = "2s"
autostop_minutes = 30
[native]
command = ["my-agent", "--flag"]
[env]
forward = ["MY_KEY"]
forward_unless = ["MY_HARNESS"]
`), 0o644)
	c, err := Load(Sources{
		File:   file,
		Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_ROOT": "/env/root", "AGENT_CONTROL_PLANE_PORT_RANGE": "7000-7099", "AGENT_CONTROL_PLANE_AUTOSTOP_MINUTES": "0.5", "HOME": "/home/u"}),
		Flags:  map[string]string{"port-range": "8000-8099"},
	})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"listen from file", c.Listen, "127.0.0.1:5000"},
		{"root: env beats file", c.Root, "/env/root"},
		{"ports: flag beats env", c.Ports, PortRange{8000, 8099}},
		{"grace from file", c.StopGrace, 2 * time.Second},
		{"fractional autostop from env", c.AutoStop, 30 * time.Second},
		{"command from file", strings.Join(c.NativeCommand, " "), "my-agent --flag"},
		{"forward from file", strings.Join(c.EnvForward, ","), "MY_KEY"},
		{"forward_unless from file", strings.Join(c.EnvForwardUnless, ","), "MY_HARNESS"},
		{"default startup timeout", c.StartupTimeout, 60 * time.Second},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load(Sources{Getenv: env(map[string]string{"XDG_STATE_HOME": "/state"})})
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:4025" || c.Ports != (PortRange{4100, 4999}) || c.Root != "/state/agent-control-plane/sandboxes" ||
		c.ReapInterval != time.Minute || c.AutoStop != 15*time.Minute || c.MaxLifetime != 0 || c.StopGrace != 5*time.Second ||
		!slices.Equal(c.EnvForwardUnless, DefaultEnvForwardUnless) {
		t.Fatalf("defaults %+v", c)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		f, _ := os.CreateTemp(dir, "*.toml")
		f.WriteString(body)
		f.Close()
		return f.Name()
	}
	tests := []struct {
		why  string
		src  Sources
		want string
	}{
		{"syntax", Sources{File: write("listen = ")}, "config "},
		{"unknown key", Sources{File: write("[native]\ncomand = []\n")}, "unknown key native.comand"},
		{"wrong type", Sources{File: write("stop_grace = 5\n")}, "config "},
		{"negative duration", Sources{File: write(`stop_grace = "-1s"` + "\n")}, "negative"},
		{"missing file", Sources{File: filepath.Join(dir, "nope.toml")}, "nope.toml"},
		{"reversed range", Sources{Flags: map[string]string{"port-range": "5000-4000"}}, "--port-range"},
		{"range past 65535", Sources{Flags: map[string]string{"port-range": "65000-70000"}}, "65535"},
		{"public listen", Sources{Flags: map[string]string{"listen": "0.0.0.0:4025"}}, "not a loopback"},
		{"listen inside range", Sources{Flags: map[string]string{"listen": "127.0.0.1:4500"}}, "inside the sandbox port range"},
		{"bad bool", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_REAP_ON_EXIT": "maybe"})}, "REAP_ON_EXIT"},
		{"bad ms", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_REAP_INTERVAL_MS": "-5"})}, "milliseconds"},
		{"zero reap interval", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_REAP_INTERVAL_MS": "0"})}, "reap interval"},
		{"bad minutes", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_AUTOSTOP_MINUTES": "NaN"})}, "minutes"},
		{"bad command", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_NATIVE_COMMAND": `"agent"`})}, "JSON array"},
		{"bad log format flag", Sources{Flags: map[string]string{"log-format": "xml"}}, "log format"},
		{"bad forward key", Sources{File: write("[env]\nforward = [\"A-B\"]\n")}, "env.forward:"},
		{"bad isolation", Sources{Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_ISOLATION": "chroot"})}, "isolation \"chroot\": want auto, namespaces or off"},
		{"bad isolation in the file", Sources{File: write("isolation = \"vm\"\n")}, "isolation \"vm\""},
		{"bad forward_unless key", Sources{File: write("[env]\nforward_unless = [\"A B\"]\n")}, "env.forward_unless:"},
	}
	for _, tc := range tests {
		t.Run(tc.why, func(t *testing.T) {
			if tc.src.Getenv == nil {
				tc.src.Getenv = env(map[string]string{"HOME": "/h"})
			}
			_, err := Load(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestAllowNonLoopback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(file, []byte("allow_non_loopback = true\n"), 0o644)
	if _, err := Load(Sources{File: file, Getenv: env(nil), Flags: map[string]string{"listen": "0.0.0.0:4025"}}); err != nil {
		t.Fatal(err)
	}
}

func TestReadEnvFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".env")
	os.WriteFile(p, []byte("# comment\nexport A=1\nB=\"two words\"\n\nC='x=y'\n"), 0o600)
	m, err := ReadEnvFile(p)
	if err != nil || m["A"] != "1" || m["B"] != "two words" || m["C"] != "x=y" {
		t.Fatalf("%v %v", m, err)
	}
	os.WriteFile(p, []byte("not a pair\n"), 0o600)
	if _, err := ReadEnvFile(p); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("bad line: %v", err)
	}
}

// The example in contrib/ parses and says what the defaults are.
func TestExampleConfig(t *testing.T) {
	getenv := env(map[string]string{"HOME": "/h"})
	c, err := Load(Sources{File: "../contrib/agent-control-plane.example.toml", Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	d := Default(getenv)
	d.Root = c.Root
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.EnvForward, ",") != strings.Join(d.EnvForward, ",") || c.Listen != d.Listen || c.Ports != d.Ports ||
		c.StopGrace != d.StopGrace || c.AutoStop != d.AutoStop || c.EventBuffer != d.EventBuffer || c.ReadyPath != d.ReadyPath {
		t.Fatalf("the example's values differ from the defaults:\nexample %+v\ndefault %+v", c, d)
	}
}

// The README documents every environment variable the daemon reads.
func TestREADMEDocumentsEveryEnvVar(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range EnvVars() {
		if !strings.Contains(string(b), "`"+name+"`") {
			t.Errorf("README.md does not document %s", name)
		}
	}
}

// Diff names every setting: change any one field and exactly one key comes
// back, so a reload never misses a setting that needs a restart.
func TestDiffNamesEveryField(t *testing.T) {
	base := Default(func(string) string { return "" })
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Type().Field(i).Name {
		case "File", "Origins":
			continue // where settings came from, not settings
		case "Snapshots":
			changed.Snapshots = map[string]snapshot.Snapshot{"web": {Command: []string{"x"}}}
			if keys := Diff(base, changed); !slices.Equal(keys, []string{"snapshots.web"}) {
				t.Errorf("a snapshot added: Diff named %v", keys)
			}
			changed.Snapshots = map[string]snapshot.Snapshot{"web": {Command: []string{"x"}, Env: map[string]string{"A": "1"}}}
			base2 := base
			base2.Snapshots = map[string]snapshot.Snapshot{"web": {Command: []string{"x"}, Env: map[string]string{"A": "2"}}}
			if keys := Diff(base2, changed); !slices.Equal(keys, []string{"snapshots.web"}) {
				t.Errorf("a snapshot's env value changed: Diff named %v", keys)
			}
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("x")))
		case reflect.Struct:
			switch g := f.Field(0); g.Kind() {
			case reflect.Float64:
				g.SetFloat(g.Float() + 1)
			case reflect.String:
				g.SetString(g.String() + "x")
			default:
				g.SetInt(g.Int() + 1)
			}
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
		if keys := Diff(base, changed); len(keys) != 1 {
			t.Errorf("field %s: Diff named %v, want one key", v.Type().Field(i).Name, keys)
		}
	}
}

func TestSnapshots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.toml")
	os.WriteFile(file, []byte(`
[native]
ready_path = "/health"
[snapshots.py]
command = ["python3", "-m", "http.server", "${PORT}"]
ready_path = "/"
env = { PYTHONUNBUFFERED = "1", SECRET = "s3cret" }
startup_timeout = "20s"
stop_grace = "0s"
[snapshots.img]
runtime = "docker"
image = "my/agent:1"
`), 0o644)
	c, err := Load(Sources{File: file, Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	py := c.Snapshots["py"]
	if !slices.Equal(py.Command, []string{"python3", "-m", "http.server", "${PORT}"}) || py.ReadyPath != "/" ||
		py.Env["SECRET"] != "s3cret" || py.StartupTimeout != 20*time.Second || py.StopGrace == nil || *py.StopGrace != 0 {
		t.Errorf("snapshots.py = %+v", py)
	}
	if img := c.Snapshots["img"]; img.Runtime != "docker" || img.Image != "my/agent:1" || img.StopGrace != nil {
		t.Errorf("snapshots.img = %+v", img)
	}
	// [native] is the snapshot named default.
	if d := c.Snapshots["default"]; d.Runtime != "native" || d.ReadyPath != "/health" || len(d.Command) != 0 {
		t.Errorf("snapshots.default = %+v", d)
	}
	var text strings.Builder
	for _, s := range c.Settings() {
		text.WriteString(s.Key + "=" + s.Value + " " + s.Origin + "\n")
	}
	for _, want := range []string{"snapshots.py.command=", "snapshots.default.ready_path=\"/health\" file", "snapshots.py.env={ PYTHONUNBUFFERED = \"(hidden)\", SECRET = \"(hidden)\" } file"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("settings lack %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "s3cret") {
		t.Error("settings show a snapshot's env value")
	}

	// A default snapshot given twice is refused.
	os.WriteFile(file, []byte("[native]\ncommand = [\"a\"]\n[snapshots.default]\ncommand = [\"b\"]\n"), 0o644)
	if _, err := Load(Sources{File: file, Getenv: env(nil)}); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Errorf("[native] command and [snapshots.default]: %v", err)
	}
	os.WriteFile(file, []byte("[snapshots.x]\ncomand = [\"a\"]\n"), 0o644)
	if _, err := Load(Sources{File: file, Getenv: env(nil)}); err == nil || !strings.Contains(err.Error(), "snapshots.x.comand") {
		t.Errorf("a misspelt snapshot key: %v", err)
	}
}

// The config file is looked for where people look: $XDG_CONFIG_HOME,
// else ~/.config; a named one wins; a missing default is no error.
func TestDefaultConfigFile(t *testing.T) {
	home, xdg := t.TempDir(), t.TempDir()
	write := func(dir, listen string) string {
		p := filepath.Join(dir, "agent-control-plane", "config.toml")
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("listen = \""+listen+"\"\n"), 0o600)
		return p
	}
	c, err := Load(Sources{Getenv: env(map[string]string{"HOME": home})})
	if err != nil || c.File != "" || c.Listen != DefaultListen {
		t.Fatalf("no file anywhere: %v, file %q, listen %s", err, c.File, c.Listen)
	}
	homeFile := write(filepath.Join(home, ".config"), "127.0.0.1:5001")
	xdgFile := write(xdg, "127.0.0.1:5002")
	for _, tc := range []struct {
		env        map[string]string
		file       string
		wantFile   string
		wantListen string
	}{
		{map[string]string{"HOME": home}, "", homeFile, "127.0.0.1:5001"},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, "", xdgFile, "127.0.0.1:5002"},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": "relative"}, "", homeFile, "127.0.0.1:5001"},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg, "AGENT_CONTROL_PLANE_CONFIG": homeFile}, "", homeFile, "127.0.0.1:5001"},
		{map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, homeFile, homeFile, "127.0.0.1:5001"},
	} {
		c, err := Load(Sources{File: tc.file, Getenv: env(tc.env)})
		if err != nil || c.File != tc.wantFile || c.Listen != tc.wantListen || c.Origins["listen"] != "file" {
			t.Errorf("%v --config %q: %v, file %q, listen %s (%s)", tc.env, tc.file, err, c.File, c.Listen, c.Origins["listen"])
		}
	}
}

func TestOrigins(t *testing.T) {
	c, err := Load(Sources{
		Getenv: env(map[string]string{"AGENT_CONTROL_PLANE_ROOT": "/env/root", "AGENT_CONTROL_PLANE_TOKEN": "0123456789abcdef0123456789abcdef"}),
		Flags:  map[string]string{"listen": "127.0.0.1:5003"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Setting{}
	for _, s := range c.Settings() {
		got[s.Key] = s
	}
	for key, want := range map[string]string{"root": "env AGENT_CONTROL_PLANE_ROOT", "listen": "flag --listen", "log_level": "default", "token": "env AGENT_CONTROL_PLANE_TOKEN"} {
		if got[key].Origin != want {
			t.Errorf("%s: origin %q, want %q", key, got[key].Origin, want)
		}
	}
	if tok := got["token"]; tok.Value != `"(hidden)"` || !tok.EnvOnly {
		t.Errorf("token shown as %s (env only %v)", tok.Value, tok.EnvOnly)
	}
}
