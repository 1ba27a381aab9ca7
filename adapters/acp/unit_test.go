package acp

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
)

func TestExtractJSON(t *testing.T) {
	for _, tc := range []struct {
		text string
		want any
		ok   bool
	}{
		{`{"a": 1}`, map[string]any{"a": float64(1)}, true},
		{"  [1, 2]\n", []any{float64(1), float64(2)}, true},
		{"Sure:\n```json\n{\"a\": true}\n```\nDone.", map[string]any{"a": true}, true},
		{"```\n{\"plain\": 1}\n```", map[string]any{"plain": float64(1)}, true},
		{"```go\nx := {}\n```\n```json\n{\"b\": 2}\n```", map[string]any{"b": float64(2)}, true},
		{`The answer is {"c": [1, {"d": null}]} as requested.`, map[string]any{"c": []any{float64(1), map[string]any{"d": nil}}}, true},
		{`Use {braces} like {"e": "x"} here`, map[string]any{"e": "x"}, true},
		{"no json at all", nil, false},
		{"", nil, false},
	} {
		got, ok := extractJSON(tc.text)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("extractJSON(%q) = %#v, %t; want %#v, %t", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCommandAllowed(t *testing.T) {
	b, err := New(Config{Command: "x", Dir: t.TempDir(), AllowCommands: []string{"go test", "ls", "npm run  lint"}})
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]bool{
		"go test ./...":           true,
		"go  test":                true,
		"ls -la":                  true,
		"npm run lint --fix":      true,
		"go":                      false,
		"go build":                false,
		"gotest":                  false,
		"lsof":                    false,
		"go test ./... && rm -rf": false,
		"go test; rm -rf /":       false,
		"ls | sh":                 false,
		"ls $(rm -rf /)":          false,
		"ls `rm -rf /`":           false,
		"ls > /etc/passwd":        false,
		"go test\nrm -rf /":       false,
		"":                        false,
		// Quotes are read as a shell reads them: what they hold is one literal word.
		`go test -run 'A|B'`: true,
		`"go" test`:          true,
		`ls "$HOME"`:         false,
	} {
		if got := tools.CommandAllowed(b.allow, cmd); got != want {
			t.Errorf("commandAllowed(%q) = %t, want %t", cmd, got, want)
		}
	}
}

func TestCommandOf(t *testing.T) {
	for _, tc := range []struct {
		st   toolState
		want string
	}{
		{toolState{rawInput: map[string]any{"command": "go test ./..."}}, "go test ./..."},
		{toolState{rawInput: map[string]any{"command": []any{"bash", "-lc", "go vet ./..."}}}, "go vet ./..."},
		{toolState{rawInput: map[string]any{"cmd": []any{"ls", "-la"}}}, "ls -la"},
		{toolState{title: "`make test`"}, "make test"},
		{toolState{rawInput: map[string]any{"command": []any{"ls", 3}}, title: "ls"}, ""},
	} {
		if got := command(tc.st); got != tc.want {
			t.Errorf("command(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".luft"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, ".luft"), filepath.Join(ws, "state-link")); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Command: "x", Dir: ws, AllowCommands: []string{"go test"}, AllowEdits: true, Approval: tools.ApprovalAsk,
		Protected: []string{filepath.Join(ws, ".luft"), filepath.Join(ws, "luft.toml")}})
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(b, nil, adaptersCall())
	in := filepath.Join(ws, "a.go")
	for _, tc := range []struct {
		name       string
		st         toolState
		allow, ask bool
	}{
		{"edit inside", toolState{kind: "edit", paths: []string{in}}, true, false},
		{"edit relative inside", toolState{kind: "edit", paths: []string{"a.go"}}, true, false},
		{"edit names nothing", toolState{kind: "edit"}, false, false},
		{"delete outside", toolState{kind: "delete", paths: []string{in, "/etc/passwd"}}, false, false},
		{"move raw destination outside", toolState{kind: "move", paths: []string{in}, rawInput: map[string]any{"destination": "/tmp/x"}}, false, false},
		{"read outside", toolState{kind: "read", paths: []string{"/etc/passwd"}}, false, false},
		{"read inside asks", toolState{kind: "read", paths: []string{in}}, false, true},
		{"execute allowed", toolState{kind: "execute", rawInput: map[string]any{"command": "go test ./x"}}, true, false},
		{"execute other", toolState{kind: "execute", rawInput: map[string]any{"command": "go run ."}}, false, false},
		{"execute allowed but elsewhere", toolState{kind: "execute", rawInput: map[string]any{"command": "go test ./x", "cwd": "/etc"}}, false, false},
		{"edit luft's config", toolState{kind: "edit", paths: []string{"luft.toml"}}, false, false},
		{"edit luft's state", toolState{kind: "edit", paths: []string{filepath.Join(ws, ".luft", "luft.db")}}, false, false},
		{"edit luft's state through a link", toolState{kind: "edit", paths: []string{"state-link/luft.db"}}, false, false},
		{"edit git's config", toolState{kind: "edit", paths: []string{filepath.Join(ws, ".git", "config")}}, false, false},
		{"write a hook", toolState{kind: "edit", rawInput: map[string]any{"file_path": "sub/.git/hooks/pre-commit"}}, false, false},
		{"plant a config deeper", toolState{kind: "move", paths: []string{in}, rawInput: map[string]any{"destination": filepath.Join(ws, "pkg", "luft.toml")}}, false, false},
		{"other asks", toolState{kind: "other", title: "mystery"}, false, true},
		{"no kind asks", toolState{title: "mystery"}, false, true},
	} {
		allow, why, ask := s.decide(tc.st)
		if allow != tc.allow || ask != tc.ask || (!allow && why == "") {
			t.Errorf("%s: allow %t ask %t (%s), want allow %t ask %t", tc.name, allow, ask, why, tc.allow, tc.ask)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 10}
	for range 100 {
		tb.Write([]byte("0123456789abc"))
	}
	if got := tb.String(); got != "...3456789abc" || len(tb.buf) > 20 {
		t.Errorf("tail %q (kept %d bytes)", got, len(tb.buf))
	}
	small := &tailBuffer{max: 10}
	small.Write([]byte(" hi \n"))
	if small.String() != "hi" {
		t.Errorf("small tail %q", small.String())
	}
}

func TestInsideResolvesSymlinks(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	if err := os.Symlink(out, filepath.Join(ws, "out")); err != nil {
		t.Skip("no symlinks here:", err)
	}
	b, err := New(Config{Command: "x", Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		filepath.Join(ws, "a", "b.txt"):       true,
		filepath.Join(ws, "out", "new.txt"):   false,
		filepath.Join(ws, "..", "x"):          false,
		ws:                                    true,
		filepath.Join(out, "x"):               false,
		strings.TrimSuffix(ws, "/") + "-evil": false,
	} {
		if got := b.inside(p); got != want {
			t.Errorf("inside(%s) = %t, want %t", p, got, want)
		}
	}
}

func adaptersCall() adapters.Call { return adapters.Call{} }

// TestAgentEnv: an agent started without an explicit Env gets the base variables, its
// own credentials and what its config names, and no other secret of luft's.
func TestAgentEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "HOME=/h", "HTTPS_PROXY=http://proxy:3128",
		"ANTHROPIC_API_KEY=sk-ant", "OPENAI_API_KEY=sk-openai", "GITHUB_TOKEN=ghp", "AWS_SECRET_ACCESS_KEY=aws", "MY_AGENT_FLAG=1"}
	claude, _ := Builtin("claude")
	codex, _ := Builtin("codex")
	custom := Config{Command: "my-agent", PassEnv: []string{"MY_AGENT_*"}}
	for _, tc := range []struct {
		cfg        Config
		want, deny []string
	}{
		{claude, []string{"PATH=/bin", "HOME=/h", "HTTPS_PROXY=http://proxy:3128", "ANTHROPIC_API_KEY=sk-ant"}, []string{"sk-openai", "ghp", "aws", "MY_AGENT"}},
		{codex, []string{"OPENAI_API_KEY=sk-openai"}, []string{"sk-ant", "ghp", "aws"}},
		{custom, []string{"MY_AGENT_FLAG=1", "PATH=/bin"}, []string{"sk-ant", "sk-openai", "ghp", "aws"}},
	} {
		got := strings.Join(AgentEnv(tc.cfg, environ), "\n")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: env lacks %s:\n%s", tc.cfg.Command, w, got)
			}
		}
		for _, d := range tc.deny {
			if strings.Contains(got, d) {
				t.Errorf("%s: env has %s:\n%s", tc.cfg.Command, d, got)
			}
		}
	}
	if _, err := New(Config{Command: "x", Dir: t.TempDir(), PassEnv: []string{"A=B"}}); err == nil || !strings.Contains(err.Error(), "not an environment variable name") {
		t.Errorf("a bad env name: %v", err)
	}
}

// A path longer than any file may have (here 1 MiB of "d/" parts) is refused at once, with
// the path cut in the reason: resolving it part by part took minutes.
func TestDecideRefusesHugePaths(t *testing.T) {
	ws := t.TempDir()
	b, err := New(Config{Command: "x", Dir: ws, AllowEdits: true, Approval: tools.ApprovalAllow})
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(b, nil, adaptersCall())
	huge := filepath.Join(ws, strings.Repeat("d/", 512<<10)+"f")
	allow, why, _ := s.decide(toolState{kind: "edit", paths: []string{huge}})
	if allow || !strings.Contains(why, "more than the 4096 a file may have") || len(why) > 400 {
		t.Fatalf("allow %t, reason (%d bytes) %.300q", allow, len(why), why)
	}
}
