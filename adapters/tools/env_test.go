package tools

import (
	"slices"
	"strings"
	"testing"
)

func TestChildEnv(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u",
		"OPENAI_API_KEY=sk-secret", "ANTHROPIC_API_KEY=sk-ant", "GITHUB_TOKEN=ghp", "AWS_SECRET_ACCESS_KEY=aws",
		"GOPATH=/home/u/go", "GOFLAGS=-mod=mod", "MALFORMED", "=nameless", "PATH=/second",
	}
	tests := []struct {
		name string
		pass []string
		set  map[string]string
		want []string
	}{
		{name: "base only", want: []string{"PATH=/second", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u"}},
		{name: "named and prefixed", pass: []string{"GOPATH", "GOF*"},
			want: []string{"PATH=/second", "HOME=/home/u", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u", "GOPATH=/home/u/go", "GOFLAGS=-mod=mod"}},
		{name: "set wins", set: map[string]string{"HOME": "/tmp/h", "MCP_MODE": "x"},
			want: []string{"PATH=/second", "HOME=/tmp/h", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "USER=u", "MCP_MODE=x"}},
	}
	for _, tt := range tests {
		got := ChildEnv(environ, tt.pass, tt.set)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: ChildEnv = %q, want %q", tt.name, got, tt.want)
		}
		for _, kv := range got {
			for _, secret := range []string{"sk-secret", "sk-ant", "ghp", "aws"} {
				if strings.HasSuffix(kv, "="+secret) {
					t.Errorf("%s: a credential went through: %s", tt.name, kv)
				}
			}
		}
	}
}

func TestCheckEnvNames(t *testing.T) {
	if err := CheckEnvNames("[tools] env", []string{"GOPATH", "GO*", "A_B"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "*", "A=B", "A B", "A*B*"} {
		if err := CheckEnvNames("[tools] env", []string{bad}); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}
