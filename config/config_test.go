package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func parseFile(t *testing.T, name string) (Config, error) {
	t.Helper()
	p := filepath.Join("testdata", name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(p, data)
}

func TestSpecExample(t *testing.T) {
	c, err := parseFile(t, "spec.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Path:           "testdata/spec.toml",
		DefaultBackend: "local",
		Backends: map[string]Backend{"local": {
			Type: "openai", BaseURL: "http://127.0.0.1:11434/v1", Model: "llama3.2",
			MaxConcurrency: 4, Replicas: []string{},
		}},
		Tools:      Tools{Workspace: ".", AllowCommands: []string{"go test", "ls"}},
		MCPServers: map[string]MCPServer{"search": {Command: "npx", Args: []string{"-y", "some-mcp-server"}}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	slots, tpm, rpm, replicas, fb := c.Lane("local")
	if slots != 4 || tpm != 0 || rpm != 0 || len(replicas) != 0 || fb != "" {
		t.Fatalf("Lane(local) = %d %d %d %v %q", slots, tpm, rpm, replicas, fb)
	}
}

func TestFull(t *testing.T) {
	c, err := parseFile(t, "full.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Path:           "testdata/full.toml",
		DefaultBackend: "claude",
		PlannerModel:   "groq/llama-3.3-70b",
		Backends: map[string]Backend{
			"claude": {Type: "acp:claude"},
			"groq": {Type: "openai", BaseURL: "https://api.groq.com/openai/v1", Model: "llama-3.3-70b",
				APIKeyEnv: "GROQ_API_KEY", TPM: 6000, RPM: 30, PriceInputPerMTok: 0.59, PriceOutputPerMTok: 0.79},
			"vllm":     {Type: "openai", MaxConcurrency: 8, Fallback: "groq", Replicas: []string{"http://gpu2:8000/v1", "http://gpu3:8000/v1"}},
			"agent":    {Type: "acp", Command: "my-agent", Args: []string{"--acp"}},
			"scripted": {Type: "mockfile", MockFile: "replies.json"},
		},
		MCPServers: map[string]MCPServer{"web": {URL: "http://127.0.0.1:9000/mcp"},
			"files": {Command: "fs-server", Args: []string{"--root", "."}, Env: map[string]string{"TOKEN": "x"}}},
		Scheduler: Scheduler{SuspendAfter: 90 * time.Second, Slots: 2},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	for _, tc := range []struct {
		id                     string
		slots, tpm, rpm, nrepl int
		fb                     string
	}{
		{"claude", 0, 0, 0, 0, ""},
		{"groq", 0, 6000, 30, 0, ""},
		{"vllm", 8, 0, 0, 2, "groq"},
		{"unconfigured", 2, 0, 0, 0, ""},
	} {
		slots, tpm, rpm, repl, fb := c.Lane(tc.id)
		if slots != tc.slots || tpm != tc.tpm || rpm != tc.rpm || len(repl) != tc.nrepl || fb != tc.fb {
			t.Errorf("Lane(%s) = %d %d %d %v %q", tc.id, slots, tpm, rpm, repl, fb)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"mcp_url_env.toml", "testdata/mcp_url_env.toml:2: mcp_servers.s.url: args, env and pass_env start a command; a url server takes none of them"},
		{"env_names.toml", `testdata/env_names.toml:5: mcp_servers.gh.pass_env: "GITHUB TOKEN" is not an environment variable name (give names such as "GOPATH", or a prefix such as "GO*")`},
		{"bad_approval.toml", `testdata/bad_approval.toml:3: tools.approval: unknown policy "sometimes" (one of allow, deny, ask)`},
		{"bad_idle.toml", `testdata/bad_idle.toml:3: backends.claude.idle_timeout: not a duration: "forever" (e.g. "2m", "90s")`},
		{"bad_type.toml", `testdata/bad_type.toml:2: backends.local.type: unknown backend type "claude" (one of openai, anthropic, mock, mockfile, acp)`},
		{"missing_type.toml", `testdata/missing_type.toml:1: backends.local: type is required (one of openai, anthropic, mock, mockfile, acp)`},
		{"negative.toml", "testdata/negative.toml:4: backends.local.rpm: must not be negative (got -1)"},
		{"negative_price.toml", "testdata/negative_price.toml:3: backends.local.price_output_per_mtok: must not be negative (got -0.5)"},
		{"default_undefined.toml", `testdata/default_undefined.toml:2: default_backend: backend "lcoal" is not defined (defined: local)`},
		{"fallback_undefined.toml", `testdata/fallback_undefined.toml:6: backends.b.fallback: backend "c" is not defined (defined: a, b)`},
		{"fallback_type.toml", `testdata/fallback_type.toml:3: backends.a.fallback: backend "b" is of type "mock"; a fallback takes over this backend's turns and must be of the same type ("openai")`},
		{"fallback_self.toml", `testdata/fallback_self.toml:3: backends.a.fallback: a backend cannot be its own fallback`},
		{"bad_duration.toml", `testdata/bad_duration.toml:3: scheduler.suspend_after: not a duration: "two minutes" (e.g. "2m", "90s")`},
		{"wrong_value_type.toml", "testdata/wrong_value_type.toml:3: backends.local.max_concurrency: incompatible types: TOML value has type string; destination has type integer"},
		{"syntax.toml", "testdata/syntax.toml:3: backends.local.model: expected value but found '\\n' instead"},
		{"dotted.toml", "testdata/dotted.toml:2: backends.x.tpm: must not be negative (got -5)"},
		{"mcp_empty.toml", "testdata/mcp_empty.toml:1: mcp_servers.s: needs command or url"},
		{"multiline.toml", "testdata/multiline.toml:10: backends.a.tpm: must not be negative (got -1)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := parseFile(t, tc.file)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), config %+v; want *Error", err, err, c)
			}
			if err.Error() != tc.want {
				t.Fatalf("got  %s\nwant %s", err, tc.want)
			}
		})
	}
}

// Unknown keys are warned about, not fatal: a newer luft's config still loads.
func TestUnknownKeysWarn(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"unknown_key.toml", "testdata/unknown_key.toml:5: backends.local.max_concurency: unknown key, ignored (known: api_key_env, args, base_url, command, env, fallback, idle_timeout, max_concurrency, max_turns, mock_file, model, price_input_per_mtok, price_output_per_mtok, replicas, rpm, stream, structured_output, tpm, type)"},
		{"unknown_table.toml", "testdata/unknown_table.toml:1: tool: unknown key, ignored (known: backends, default_backend, limits, mcp_servers, node, planner_model, proxy, scheduler, storage, tools)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := parseFile(t, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Warnings, []string{tc.want}) {
				t.Fatalf("warnings %q\nwant %q", c.Warnings, tc.want)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadOrder(t *testing.T) {
	root := t.TempDir()
	cwd := filepath.Join(root, "cwd")
	home := filepath.Join(root, "home")
	xdg := filepath.Join(root, "xdg")
	explicit := filepath.Join(root, "explicit.toml")
	local := filepath.Join(cwd, "luft.toml")
	homeCfg := filepath.Join(home, ".config", "luft", "config.toml")
	xdgCfg := filepath.Join(xdg, "luft", "config.toml")
	for _, p := range []string{explicit, local, homeCfg, xdgCfg} {
		write(t, p, "default_backend = \""+filepath.Base(filepath.Dir(p))+"\"\n[backends."+filepath.Base(filepath.Dir(p))+"]\ntype = \"mock\"\n")
	}
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	noXDG := env(nil)
	withXDG := env(map[string]string{"XDG_CONFIG_HOME": xdg})

	t.Chdir(cwd)
	for _, tc := range []struct {
		name     string
		explicit string
		getenv   func(string) string
		rm       []string
		want     string // Path; "" = empty config
	}{
		{"explicit beats all", explicit, withXDG, nil, explicit},
		{"local beats home", "", noXDG, nil, "luft.toml"},
		{"local beats xdg", "", withXDG, nil, "luft.toml"},
		{"xdg beats home", "", withXDG, []string{local}, xdgCfg},
		{"home", "", noXDG, []string{local}, homeCfg},
		{"nil getenv", "", nil, []string{local}, homeCfg},
		{"xdg set but empty: not home", "", withXDG, []string{local, xdgCfg}, ""},
		{"nothing", "", noXDG, []string{local, xdgCfg, homeCfg}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range tc.rm {
				os.Remove(p)
			}
			c, err := Load(tc.explicit, tc.getenv, home)
			if err != nil {
				t.Fatal(err)
			}
			if c.Path != tc.want {
				t.Fatalf("Path = %q, want %q", c.Path, tc.want)
			}
			if tc.want == "" && !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("want the empty config, got %+v", c)
			}
			if tc.want != "" && len(c.Backends) != 1 {
				t.Fatalf("backends = %v", c.Backends)
			}
		})
	}

	t.Run("explicit missing", func(t *testing.T) {
		missing := filepath.Join(root, "nope.toml")
		_, err := Load(missing, noXDG, home)
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, os.ErrNotExist) || e.File != missing {
			t.Fatalf("err = %v", err)
		}
		if want := missing + ": no such file or directory"; err.Error() != want {
			t.Fatalf("got %q, want %q", err, want)
		}
	})
	t.Run("invalid local", func(t *testing.T) {
		write(t, local, "[backends.x]\ntype = \"nope\"\n")
		_, err := Load("", noXDG, home)
		if want := `luft.toml:2: backends.x.type: unknown backend type "nope" (one of openai, anthropic, mock, mockfile, acp)`; err == nil || err.Error() != want {
			t.Fatalf("got %v, want %s", err, want)
		}
	})
}

func TestKeyLinesQuoted(t *testing.T) {
	src := "[backends.\"a.b\"]\ntype = 'mock'\n\"rpm\" = -1\n"
	c, err := Parse("q.toml", []byte(src))
	if want := `q.toml:3: backends."a.b".rpm: must not be negative (got -1)`; err == nil || err.Error() != want {
		t.Fatalf("got %v (%+v), want %s", err, c, want)
	}
}

// The decoder fills fields case-insensitively, so errors about [BACKENDS.x] must still
// find the line ([BACKENDS.x] used to be reported at line 0).
func TestErrorLineOfCaseFoldedTable(t *testing.T) {
	_, err := Parse("c.toml", []byte("default_backend = \"\"\n\n[BACkends.local]\nmodel = \"m\"\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 3 || ce.Key != "backends.local" {
		t.Fatalf("got %v, want c.toml:3: backends.local: type is required", err)
	}
}

// A string cut by the end of the file: the decoder says line 0 (or one short) and shows
// a NUL; the error names the real line and escapes the NUL.
func TestSyntaxErrorAtEndOfFile(t *testing.T) {
	for src, line := range map[string]int{"\"\\": 1, "a = 1\nb = \"\\": 2} {
		_, err := Parse("c.toml", []byte(src))
		var ce *Error
		if !errors.As(err, &ce) || ce.Line != line || strings.ContainsRune(ce.Msg, 0) {
			t.Errorf("Parse(%q) = %q, want an error on line %d without a NUL", src, err, line)
		}
	}
}

// The decoder leaves the line out of some type errors; it is found from the key.
func TestTypeErrorWithoutLine(t *testing.T) {
	_, err := Parse("c.toml", []byte("[backends.x]\ntype = \"mock\"\nfallback.y = \"\"\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 3 || !strings.HasPrefix(ce.Key, "backends.x.fallback") {
		t.Fatalf("got %v, want c.toml:3: backends.x.fallback...", err)
	}
}

func TestProxyTable(t *testing.T) {
	c, err := Parse("luft.toml", []byte("[proxy]\nidle_timeout = \"5m\"\nmax_body = 1048576\n"))
	if err != nil || c.Proxy.IdleTimeout != 5*time.Minute || c.Proxy.MaxBody != 1<<20 {
		t.Fatalf("%+v %v", c.Proxy, err)
	}
	for data, want := range map[string]string{
		"[proxy]\nidle_timeout = \"soon\"\n": `luft.toml:2: proxy.idle_timeout: not a duration: "soon"`,
		"[proxy]\nmax_body = -1\n":           "luft.toml:2: proxy.max_body: must not be negative (got -1)",
		"[proxy]\nmax_body = 99999999999\n":  "luft.toml:2: proxy.max_body: must be at most 1073741824",
		// Hostile shapes: out of range for the type, the wrong type, the table not a table.
		"[proxy]\nidle_timeout = \"-5m\"\n":             "luft.toml:2: proxy.idle_timeout: must not be negative (got -5m)",
		"[proxy]\nidle_timeout = \"99999999999h\"\n":    `luft.toml:2: proxy.idle_timeout: not a duration: "99999999999h"`,
		"[proxy]\nidle_timeout = 5\n":                   "luft.toml:2: proxy.idle_timeout: incompatible types",
		"[proxy]\nmax_body = \"big\"\n":                 "luft.toml:2: proxy.max_body: incompatible types",
		"[proxy]\nmax_body = 1.5\n":                     "luft.toml:2: proxy.max_body: incompatible types",
		"[proxy]\nmax_body = 99999999999999999999999\n": "luft.toml:2: proxy.max_body: 99999999999999999999999 is out of range",
		"proxy = 3\n": "luft.toml:1: proxy: type mismatch",
	} {
		if _, err := Parse("luft.toml", []byte(data)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", data, err, want)
		}
	}
}

// [tools] readable, network and unconfined: ports as numbers or strings, "all"; a port
// out of range or a word is refused on its line.
func TestToolsConfinement(t *testing.T) {
	c, err := Parse("luft.toml", []byte("[tools]\nreadable = [\"~/data\", \"/srv/x\"]\nnetwork = [443, \"8080\", \"all\"]\nunconfined = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Tools.Readable, []string{"~/data", "/srv/x"}) || !slices.Equal(c.Tools.Network, []string{"443", "8080", "all"}) || !c.Tools.Unconfined {
		t.Fatalf("tools = %+v", c.Tools)
	}
	for _, bad := range []string{"[0]", "[70000]", "[\"https\"]", "[\"-1\"]", "[1.5]", "[true]"} {
		_, err := Parse("luft.toml", []byte("[tools]\nnetwork = "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "not a TCP port") || !strings.Contains(err.Error(), "tools.network") && !strings.Contains(err.Error(), "network") {
			t.Errorf("network = %s: %v, want a refusal naming it", bad, err)
		}
	}
}

// [storage] url: a PostgreSQL URL, or nothing for SQLite in the state dir; anything else
// is refused on its line without repeating a password.
func TestStorageTable(t *testing.T) {
	for _, u := range []string{"postgres://luft:s3cret@db:5432/luft", "postgresql:///luft?host=/run/postgresql", ""} {
		c, err := Parse("luft.toml", []byte("[storage]\nurl = \""+u+"\"\n"))
		if err != nil || c.Storage.URL != u {
			t.Fatalf("%q: %+v %v", u, c.Storage, err)
		}
	}
	for data, want := range map[string]string{
		"[storage]\nurl = \"mysql://u:pw@h/db\"\n":         `luft.toml:2: storage.url: unknown scheme "mysql"; luft keeps runs in PostgreSQL`,
		"[storage]\nurl = \"luft.db\"\n":                   "luft.toml:2: storage.url: not a URL; write postgres://",
		"[storage]\nurl = \"postgres://u:pw@h/d b\"\n":     "luft.toml:2: storage.url: the URL holds a space",
		"[storage]\nurl = \"postgres://u:pw@h:port/db\"\n": "luft.toml:2: storage.url: not a valid URL",
		"[storage]\nurl = \"postgres://u:pw@h/\\u0000\"\n": "luft.toml:2: storage.url: the URL holds a space or a control character",
		"[storage]\nurl = 5\n":                             "luft.toml:2: storage.url: incompatible types",
		"storage = \"postgres://h/db\"\n":                  "luft.toml:1: storage: type mismatch",
	} {
		_, err := Parse("luft.toml", []byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", data, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("%q: the error repeats the password: %v", data, err)
		}
	}
	if _, err := Parse("luft.toml", []byte("[storage]\nurl = \"postgres://h/db\"\npath = \"x\"\n")); err != nil {
		t.Fatal(err)
	}
}

// [node] workspaces: a list of distinct names; a string, a table, a number or a name
// with a space or a ':' is refused on its line with the key and the form to write.
func TestNodeWorkspaces(t *testing.T) {
	c, err := Parse("luft.toml", []byte("[node]\nworkspaces = [\"repo\", \"acme/api\", \"docs_v2.1\"]\n"))
	if err != nil || !slices.Equal(c.Node.Workspaces, []string{"repo", "acme/api", "docs_v2.1"}) {
		t.Fatalf("%+v %v", c.Node, err)
	}
	if c, err := Parse("luft.toml", []byte("[node]\nlease = \"10s\"\n")); err != nil || c.Node.Workspaces != nil {
		t.Fatalf("no workspaces: %+v %v", c.Node, err)
	}
	if c, err := Parse("luft.toml", []byte("[node]\nworkspaces = []\n")); err != nil || len(c.Node.Workspaces) != 0 {
		t.Fatalf("an empty list: %+v %v", c.Node, err)
	}
	const fix = `write workspaces = ["repo"]`
	for data, want := range map[string]string{
		"[node]\nworkspaces = \"repo\"\n":                               `luft.toml:2: node.workspaces: is the string "repo", not a list; ` + fix,
		"[node]\nworkspaces = 3\n":                                      "luft.toml:2: node.workspaces: is 3, not a list of names; " + fix,
		"[node]\nworkspaces = [3]\n":                                    "luft.toml:2: node.workspaces: entry 1 is 3, not a name in quotes; " + fix,
		"[node]\nworkspaces = [\"repo\", \"my repo\"]\n":                `luft.toml:2: node.workspaces: entry 2, "my repo", is not a workspace name`,
		"[node]\nworkspaces = [\"node:x\"]\n":                           `luft.toml:2: node.workspaces: entry 1, "node:x", is not a workspace name`,
		"[node]\nworkspaces = [\"\"]\n":                                 `luft.toml:2: node.workspaces: entry 1, "", is not a workspace name`,
		"[node]\nworkspaces = [\"-x\"]\n":                               `luft.toml:2: node.workspaces: entry 1, "-x", is not a workspace name`,
		"[node]\nworkspaces = [\"a\\u0000b\"]\n":                        `luft.toml:2: node.workspaces: entry 1, "a\x00b", is not a workspace name`,
		"[node]\nworkspaces = [\"repo\", \"repo\"]\n":                   `luft.toml:2: node.workspaces: entry 2, "repo", is listed twice`,
		"[node.workspaces]\nrepo = \"/src/repo\"\n":                     "luft.toml:1: node.workspaces: is a table, not a list; the folder is [tools] workspace",
		"[node]\nworkspaces = [[\"repo\"]]\n":                           "luft.toml:2: node.workspaces: entry 1 is [repo], not a name in quotes",
		"[node]\nworkspaces = [\"" + strings.Repeat("a", 129) + "\"]\n": "at most 128",
	} {
		_, err := Parse("luft.toml", []byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %s", data, err, want)
		}
	}
}
