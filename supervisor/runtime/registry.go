package runtime

import (
	"fmt"
	"slices"
	"sync"
)

// Registry holds the runtimes this daemon offers, by name, in the order
// they were registered; the first is the default. It is safe for
// concurrent use.
type Registry struct {
	mu     sync.Mutex
	byName map[string]Runtime
	names  []string
}

// Register adds rt under name. Names are lower-case words.
func (r *Registry) Register(name string, rt Runtime) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" || !validName(name) {
		return fmt.Errorf("runtime name %q: want a lower-case word", name)
	}
	if _, dup := r.byName[name]; dup {
		return fmt.Errorf("runtime %q registered twice", name)
	}
	if r.byName == nil {
		r.byName = map[string]Runtime{}
	}
	r.byName[name] = rt
	r.names = append(r.names, name)
	return nil
}

// Get returns the runtime registered under name.
func (r *Registry) Get(name string) (Runtime, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt, ok := r.byName[name]
	return rt, ok
}

// Names lists the registered names, the default first.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.names)
}

// Default is the name of the first runtime registered, or "".
func (r *Registry) Default() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.names) == 0 {
		return ""
	}
	return r.names[0]
}

func validName(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return s[0] >= 'a' && s[0] <= 'z'
}
