package adapters

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/luft-run/luft/agent"
)

// named is a Backend that only has an id, to tell registrations apart.
type named struct {
	id  string
	tag string
}

func (n named) ID() string { return n.id }
func (n named) Run(context.Context, agent.Request, Call) (agent.Result, error) {
	return agent.Result{}, nil
}

func TestRegistry(t *testing.T) {
	mock := NewMock(MockConfig{})
	r := NewRegistry("mock", mock, named{id: "openai", tag: "first"}, nil, named{id: "openai", tag: "second"})

	if got := r.IDs(); !reflect.DeepEqual(got, []string{"mock", "openai"}) {
		t.Errorf("IDs = %v", got)
	}
	if r.Default() != "mock" {
		t.Errorf("Default = %q", r.Default())
	}
	tests := []struct {
		id      string
		want    Backend
		wantErr string
	}{
		{id: "", want: mock},
		{id: "mock", want: mock},
		{id: "openai", want: named{id: "openai", tag: "second"}}, // a later registration wins
		{id: "acp:claude", wantErr: `backend: "acp:claude" is not registered (known: mock, openai)`},
	}
	for _, tc := range tests {
		b, err := r.Get(tc.id)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Get(%q) error %v, want %q", tc.id, err, tc.wantErr)
			}
			continue
		}
		if err != nil || b != tc.want {
			t.Errorf("Get(%q) = %v, %v; want %v", tc.id, b, err, tc.want)
		}
	}
}

func TestRegistryDefaultErrors(t *testing.T) {
	tests := []struct {
		name string
		r    *Registry
		want string
	}{
		{"no default", NewRegistry("", NewMock(MockConfig{})), "no default backend set (known: mock)"},
		{"default not registered", NewRegistry("local", NewMock(MockConfig{})), `default backend "local" is not registered (known: mock)`},
		{"empty", NewRegistry("mock"), `default backend "mock" is not registered (known: none)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.r.Get(""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
