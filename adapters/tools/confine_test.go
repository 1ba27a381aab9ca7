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
