package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

// luft talks to an OpenAI-compatible endpoint configured in luft.toml or through
// OPENAI_BASE_URL: here the test kit's fake engine on a loopback port.
func TestOpenAIBackendEndToEnd(t *testing.T) {
	engine := testkit.NewEngine(testkit.Config{Replicas: 1, Slots: 2, DefaultMaxTokens: 8})
	srv := testkit.NewServer(engine)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("wf.lua", `function main()
  local a = agent{prompt = "say something"}
  local b = agent{prompt = "give a record", schema = {type = "object", properties = {n = {type = "integer"}}, required = {"n"}}}
  report({text = a.text ~= "", backend = a.backend, model = a.model, n = type(b.output.n), tokens = a.tokens > 0})
end`)
	write("luft.toml", fmt.Sprintf(`default_backend = "local"
[backends.local]
type = "openai"
base_url = %q
model = "fake-1"
api_key_env = "FAKE_KEY"
max_concurrency = 2
`, url))

	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(luftBinary(t), append([]string{"--state-dir", filepath.Join(dir, "state")}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("luft %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	for name, tc := range map[string]struct {
		env     []string
		args    []string
		backend string
	}{
		"config file": {env: []string{"FAKE_KEY=k"}, args: []string{"run", "-q", "-w", "wf.lua"}, backend: "local"},
		"environment": {env: []string{"OPENAI_BASE_URL=" + url, "LUFT_MODEL=fake-2"}, args: []string{"--config", "none.toml", "run", "-q", "-w", "wf.lua", "--backend", "openai"}, backend: "openai"},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "environment" {
				write("none.toml", "")
			}
			before := len(engine.Log())
			out := run(tc.env, tc.args...)
			for _, want := range []string{`"backend": "` + tc.backend + `"`, `"n": "number"`, `"text": true`, `"tokens": true`} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %s:\n%s", want, out)
				}
			}
			if got := len(engine.Log()) - before; got != 2 {
				t.Errorf("the engine saw %d requests, want 2", got)
			}
		})
	}
}
