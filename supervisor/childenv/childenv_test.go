package childenv

import (
	"maps"
	"slices"
	"testing"
)

func TestBuild(t *testing.T) {
	p := Policy{
		Base:          map[string]string{"PATH": "/bin", "HOME": "/home/u"},
		Forward:       map[string]string{"API_KEY": "secret", "OTHER_KEY": "k2"},
		ForwardUnless: []string{"HARNESS_TOKEN"},
	}
	own := map[string]string{"PORT": "4001"}
	got := p.Build(map[string]string{"OTHER_KEY": "mine", "PORT": "1", "HOME": "/w"}, own)
	want := map[string]string{"PATH": "/bin", "HOME": "/w", "API_KEY": "secret", "OTHER_KEY": "mine", "PORT": "4001"}
	if !maps.Equal(got, want) {
		t.Errorf("standalone: got %v, want %v", got, want)
	}
	got = p.Build(map[string]string{"HARNESS_TOKEN": "h"}, own)
	if _, ok := got["API_KEY"]; ok {
		t.Errorf("a harness request got a forwarded credential: %v", got)
	}
	if (Policy{}).Build(nil, nil) == nil {
		t.Error("the zero policy returned a nil map")
	}
	if s := p.Secrets(); len(s) != 2 || !slices.Contains(s, "secret") {
		t.Errorf("Secrets = %v", s)
	}
	if l := List(map[string]string{"B": "2", "A": "1"}); !slices.Equal(l, []string{"A=1", "B=2"}) {
		t.Errorf("List = %v", l)
	}
}
