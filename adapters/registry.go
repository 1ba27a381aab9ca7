package adapters

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Registry maps backend ids to backends. It is built once at startup and read-only after,
// so it is safe for concurrent use.
type Registry struct {
	defaultID string
	backends  map[string]Backend
}

// NewRegistry registers bs under their IDs; defaultID names the backend used when a call
// names none. A later backend with an already registered id replaces the earlier one, so
// configuration can override a built-in; nil backends are skipped.
func NewRegistry(defaultID string, bs ...Backend) *Registry {
	r := &Registry{defaultID: defaultID, backends: map[string]Backend{}}
	for _, b := range bs {
		if b != nil {
			r.backends[b.ID()] = b
		}
	}
	return r
}

// Get returns the backend registered as id; "" means the default backend.
func (r *Registry) Get(id string) (Backend, error) {
	if id == "" {
		if r.defaultID == "" {
			return nil, fmt.Errorf("backend: no backend named and no default backend set "+
				"(known: %s); set backend= on the agent or pass --backend", r.known())
		}
		b, ok := r.backends[r.defaultID]
		if !ok {
			return nil, fmt.Errorf("backend: default backend %q is not registered (known: %s)", r.defaultID, r.known())
		}
		return b, nil
	}
	b, ok := r.backends[id]
	if !ok {
		return nil, fmt.Errorf("backend: %q is not registered (known: %s); use one of these ids", id, r.known())
	}
	return b, nil
}

// Default returns the id used when a call names no backend.
func (r *Registry) Default() string { return r.defaultID }

// IDs returns the registered ids, sorted.
func (r *Registry) IDs() []string {
	return slices.Sorted(maps.Keys(r.backends))
}

func (r *Registry) known() string {
	if len(r.backends) == 0 {
		return "none"
	}
	return strings.Join(r.IDs(), ", ")
}
