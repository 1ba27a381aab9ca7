package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

func needConfinement(t *testing.T) {
	t.Helper()
	if err := sandbox.Check(sandbox.Policy{Hide: []string{os.TempDir()}, Write: []string{"/"}}); err != nil {
		t.Skipf("commands cannot be confined here: %v", err)
	}
}

// TestSecretsHidden: with the workspace in the home folder, ~/.ssh, ~/.aws and luft's
// protected paths are out of a command's reach, the rest of the workspace is not; a
// credential folder [tools] readable names becomes readable, and naming luft's state
// dir there is refused.
func TestSecretsHidden(t *testing.T) {
	needConfinement(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	for p, s := range map[string]string{
		".ssh/id_rsa":       "ssh-secret",
		".aws/credentials":  "aws-secret",
		".luft/luft.db":     "state-secret",
		"luft.toml":         "config-secret",
		"project/main.go":   "package main",
		".ssh/known_hosts2": "hosts",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFileT(t, filepath.Join(home, p), s)
	}
	protected := []string{filepath.Join(home, ".luft"), filepath.Join(home, "luft.toml")}
	s := newSet(t, Config{Workspace: home, AllowCommands: []string{"cat"}, Protected: protected})
	for _, f := range []string{".ssh/id_rsa", ".aws/credentials", ".luft/luft.db", "luft.toml"} {
		out := mustCall(t, s, "run_command", map[string]any{"command": "cat " + f})
		if strings.Contains(out, "-secret") || !strings.Contains(out, "Permission denied") {
			t.Errorf("cat %s: %q, want it refused", f, out)
		}
	}
	if out := mustCall(t, s, "run_command", map[string]any{"command": "cat project/main.go"}); !strings.Contains(out, "package main") {
		t.Errorf("the workspace itself: %q", out)
	}

	named := newSet(t, Config{Workspace: home, AllowCommands: []string{"cat"}, Protected: protected, Readable: []string{"~/.ssh"}})
	if out := mustCall(t, named, "run_command", map[string]any{"command": "cat .ssh/id_rsa"}); !strings.Contains(out, "ssh-secret") {
		t.Errorf("a credential folder named in [tools] readable: %q", out)
	}
	if out := mustCall(t, named, "run_command", map[string]any{"command": "cat .aws/credentials"}); strings.Contains(out, "aws-secret") {
		t.Errorf("naming ~/.ssh opened ~/.aws: %q", out)
	}
	if _, err := New(Config{Workspace: home, Protected: protected, Readable: []string{"~/.luft"}}); err == nil || !strings.Contains(err.Error(), "luft's own state or config") {
		t.Errorf("readable naming the state dir: %v", err)
	}
}

// Hostile [tools] readable and network entries end in a clear error when the Set is
// built, never at a command's start: a NUL, an empty entry, a path past PATH_MAX,
// luft's own state dir through "..", a port out of range.
func TestConfinementConfigHostile(t *testing.T) {
	ws := t.TempDir()
	state := filepath.Join(ws, ".luft")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Readable: []string{"a\x00b"}}, "is not a path"},
		{Config{Readable: []string{""}}, "is not a path"},
		{Config{Readable: []string{strings.Repeat("a/", 3000)}}, "readable"},
		{Config{Readable: []string{"sub/../.luft/x"}}, "luft's own state or config"},
		{Config{Network: []string{"70000"}}, "not a TCP port"},
		{Config{Network: []string{"0"}}, "not a TCP port"},
		{Config{Network: []string{"http"}}, "not a TCP port"},
	} {
		tc.cfg.Workspace, tc.cfg.Protected = ws, []string{state}
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	many := make([]string, 5000)
	for i := range many {
		many[i] = "~/d" + strings.Repeat("x", i%50)
	}
	if _, err := New(Config{Workspace: ws, Readable: many}); err != nil {
		t.Errorf("5000 readable entries: %v", err)
	}
}
