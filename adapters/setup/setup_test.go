package setup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/config"
)

func noEnv(string) string { return "" }

// With nothing configured the mock stands in as the default, beside the built-in coding
// agents; a config's backends are registered under their names with their source.
func TestOpen(t *testing.T) {
	set, err := Open(Options{Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if !set.Auto || set.Registry.Default() != "mock" {
		t.Fatalf("auto %t, default %q", set.Auto, set.Registry.Default())
	}
	var ids []string
	for _, in := range set.Infos {
		ids = append(ids, in.ID)
	}
	if got := strings.Join(ids, ","); got != "mock,acp:claude,acp:codex,acp:gemini,acp:opencode" {
		t.Fatalf("backends %s", got)
	}

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "luft.toml")
	if err := os.WriteFile(filepath.Join(dir, "replies.json"), []byte(`{"default": {"output": "canned"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(cfgPath, []byte(`default_backend = "local"
[backends.local]
type = "openai"
base_url = "http://127.0.0.1:1/v1"
model = "m"
[backends.canned]
type = "mockfile"
mock_file = "replies.json"
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err = Open(Options{Config: cfg, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if set.Auto || set.Registry.Default() != "local" {
		t.Fatalf("auto %t, default %q", set.Auto, set.Registry.Default())
	}
	b, err := set.Registry.Get("canned")
	if err != nil || b.ID() != "canned" {
		t.Fatalf("canned: %v", err)
	}
	res, err := b.Run(context.Background(), agentReq("x"), noCall)
	if err != nil || res.Text != "canned" {
		t.Fatalf("canned reply %+v %v", res, err)
	}

	cfg.Backends["canned"] = config.Backend{Type: "mockfile", MockFile: "nowhere.json"}
	if _, err := Open(Options{Config: cfg, Getenv: noEnv}); err == nil || !strings.Contains(err.Error(), "backends.canned: mock file: open "+filepath.Join(dir, "nowhere.json")) {
		t.Fatalf("missing mock file: %v", err)
	}
}

var noCall = adapters.Call{}

func agentReq(prompt string) agent.Request { return agent.Request{Prompt: prompt} }

// The default backend: default_backend, else the config's only backend, else the mock —
// with the config's backends named when there are several and none is chosen.
func TestDefaultBackend(t *testing.T) {
	cases := []struct {
		name, toml, want string
		auto             bool
		unchosen         string
	}{
		{name: "none", toml: ``, want: "mock", auto: true},
		{name: "one", toml: "[backends.local]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n", want: "local"},
		{name: "one mock", toml: "[backends.m]\ntype = \"mock\"\n", want: "mock"},
		{name: "several", toml: "[backends.b]\ntype = \"mock\"\n[backends.a]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n",
			want: "mock", auto: true, unchosen: "a,b"},
		{name: "several and chosen", toml: "default_backend = \"a\"\n[backends.b]\ntype = \"mock\"\n[backends.a]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n",
			want: "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("luft.toml", []byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			set, err := Open(Options{Config: cfg, Getenv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			if got := set.Registry.Default(); got != tc.want || set.Auto != tc.auto || strings.Join(set.Unchosen, ",") != tc.unchosen {
				t.Fatalf("default %q auto %t unchosen %v; want %q %t %q", got, set.Auto, set.Unchosen, tc.want, tc.auto, tc.unchosen)
			}
		})
	}
}

// The environment and writable folders of [tools], [backends] and [mcp_servers] reach
// the tools and agents; a mistake in them is an error naming the file and the key.
func TestOpenChildPolicy(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		toml, want string
	}{
		{"[tools]\nworkspace = " + quote(dir) + "\nenv = [\"GOPATH\", \"GO*\"]\nwritable = [\"cache\"]\nallow_commands = [\"go test\"]\n" +
			"[mcp_servers.gh]\ncommand = \"gh-mcp\"\npass_env = [\"GITHUB_TOKEN\"]\n[backends.c]\ntype = \"acp:claude\"\nenv = [\"AWS_*\"]\n", ""},
		{"[tools]\nworkspace = " + quote(dir) + "\nwritable = [\"nowhere\"]\n", "[tools]: tools: writable \"nowhere\""},
		{"[tools]\nworkspace = " + quote(dir) + "\nenv = [\"A=B\"]\n", "luft.toml:3: tools.env: \"A=B\" is not an environment variable name"},
		{"[backends.c]\ntype = \"acp:claude\"\nenv = [\"BAD NAME\"]\n", "luft.toml:3: backends.c.env: \"BAD NAME\""},
	} {
		var set *Backends
		cfg, err := config.Parse(filepath.Join(dir, "luft.toml"), []byte(tc.toml))
		if err == nil {
			set, err = Open(Options{Config: cfg, Getenv: noEnv})
		}
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.toml, err)
				continue
			}
			set.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.toml, err, tc.want)
		}
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }
