package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// The real clients of the two new wires, run against the fake: the openai npm
// package's Responses API, Codex CLI (`codex exec` on a model provider with wire_api
// "responses") and Claude Code (`claude -p` with ANTHROPIC_BASE_URL). They come from
// NodeDir's node_modules; without it they are skipped (failed under
// LUFT_TEST_REQUIRE_TOOLS). Nothing leaves the machine: the proxies point at a closed
// port and every server is on loopback.

// agentEnv is the environment for a client under test: the test's own, without
// anything that would point it at a real provider or a real home, with HOME set to home.
func agentEnv(home string, add ...string) []string {
	drop := []string{"HOME=", "OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE", "LUFT_", "HTTP_PROXY=", "HTTPS_PROXY=",
		"ALL_PROXY=", "NO_PROXY=", "http_proxy=", "https_proxy=", "all_proxy=", "no_proxy="}
	var env []string
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost")
	return append(env, add...)
}

// runClient runs a client program in dir and returns its standard output; it fails the
// test, with both outputs, when the program fails.
func runClient(t *testing.T, dir string, env []string, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errOut, strings.NewReader("")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(prog), err, out.String(), errOut.String())
	}
	return out.String()
}

// shellRule drives a coding agent's shell tool, whatever the agent calls it: Codex's
// exec_command (or the shell tools of other versions), Claude Code's Bash. Two rounds,
// then the answer.
var shellRule = ToolRule{FirstOffered: true, Rounds: 2, Reply: "all done", Calls: []ScriptedCall{
	{Name: "exec_command", Arguments: `{"cmd":"echo from-the-fake"}`},
	{Name: "shell_command", Arguments: `{"command":"echo from-the-fake"}`},
	{Name: "shell", Arguments: `{"command":["bash","-lc","echo from-the-fake"]}`},
	{Name: "Bash", Arguments: `{"command":"echo from-the-fake","description":"Print a word"}`},
}}

// mcpRule calls the fake MCP server's lookup tool, which Codex offers as lookup in its
// mcp__fake namespace and Claude Code as mcp__fake__lookup.
var mcpRule = ToolRule{FirstOffered: true, Reply: "found it", Calls: []ScriptedCall{
	{Name: "lookup", Arguments: `{"key":"k1"}`},
	{Name: "mcp__fake__lookup", Arguments: `{"key":"k1"}`},
}}

// checkAgentRun checks the engine's log of an agent's run of rule: every request on
// wire and answered, the rule's rounds of calls, and the tools' real output sent back.
func checkAgentRun(t *testing.T, e *Engine, wire Wire, rounds int, output string) {
	t.Helper()
	log := e.Log()
	var turns []Record
	for _, r := range log {
		if r.Status != 200 || r.Wire != wire {
			t.Fatalf("record %d: status %d wire %q (%s)", r.Seq, r.Status, r.Wire, r.Error)
		}
		if len(r.Tools) > 0 { // the agent's own turns, not its side requests
			turns = append(turns, r)
		}
	}
	if len(turns) != rounds+1 {
		t.Fatalf("%d turns with tools, want %d", len(turns), rounds+1)
	}
	for i, r := range turns {
		want := 1
		if i == rounds {
			want = 0
		}
		if r.ToolCalls != want || !r.Stream {
			t.Fatalf("turn %d: %d tool calls (want %d), stream %v", i, r.ToolCalls, want, r.Stream)
		}
	}
	last := turns[len(turns)-1].Messages
	results := 0
	for _, m := range last {
		if m.Role == "tool" && strings.Contains(string(m.Content), output) {
			results++
		}
	}
	if results != rounds {
		t.Fatalf("%d tool results hold %q, want %d: %+v", results, output, rounds, last)
	}
}

// TestResponsesOpenAINodeClient: the openai npm package's client.responses.create and
// responses.stream accept the fake's responses: a function call, its output chained by
// previous_response_id, and a stream whose usage is the log's.
func TestResponsesOpenAINodeClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the openai npm client")
	}
	node := Node(t)
	NodeFile(t, "openai/package.json")
	e, _, base := startServer(t, Config{ToolRules: []ToolRule{
		{Match: "weather", Offered: true, Calls: []ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}, Reply: "Cold."}}})
	out := runClient(t, NodeDir(), agentEnv(t.TempDir()), node, "responses.mjs", base)
	var res struct {
		First struct {
			ID, Status string
			Call       struct {
				Type, ID, Name, Arguments string
				CallID                    string `json:"call_id"`
			}
		}
		Second struct{ ID, Text, Previous string }
		Stream struct {
			Events []string
			Text   string
			ID     string
			Usage  ResponseUsage
		}
		Helper struct {
			ID     string
			Output []ResponseOutputItem
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.First.Status != "completed" || res.First.Call.Name != "get_weather" || res.First.Call.Arguments != `{"city":"Oslo"}` ||
		!strings.HasPrefix(res.First.Call.CallID, "call_") || res.Second.Text != "Cold." || res.Second.Previous != res.First.ID {
		t.Fatalf("tool round trip: %s", out)
	}
	if !slices.Contains(res.Stream.Events, "response.completed") || res.Stream.Events[0] != "response.created" ||
		CountTokens(res.Stream.Text) != 8 || len(res.Helper.Output) != 1 || res.Helper.Output[0].Type != "function_call" {
		t.Fatalf("stream: %s", out)
	}
	log := e.Log()
	if len(log) != 4 {
		t.Fatalf("%d records", len(log))
	}
	if r := log[2]; r.ID != res.Stream.ID || r.PromptTokens != res.Stream.Usage.InputTokens || r.OutputTokens != res.Stream.Usage.OutputTokens || !r.Stream {
		t.Fatalf("stream usage %+v, record %+v", res.Stream.Usage, r)
	}
}

// codexHome writes a Codex home whose model provider is the fake at base (wire_api
// "responses"), with the fake MCP server at mcpURL when it is not empty.
func codexHome(t *testing.T, base, mcpURL string) string {
	t.Helper()
	home := t.TempDir()
	cfg := "model = \"fake-model\"\nmodel_provider = \"fake\"\ncheck_for_update_on_startup = false\n\n" +
		"[model_providers.fake]\nname = \"fake\"\nbase_url = \"" + base + "\"\nwire_api = \"responses\"\nenv_key = \"FAKE_KEY\"\n"
	if mcpURL != "" {
		cfg += "\n[mcp_servers.fake]\nurl = \"" + mcpURL + "\"\n"
	}
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// TestCodexExecOnResponses: Codex CLI runs a turn against the fake's Responses API: the
// shell rule's two rounds of exec_command, whose real output Codex sends back, then the
// answer; and a call of an MCP server's tool, which Codex offers in a namespace.
func TestCodexExecOnResponses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Codex CLI")
	}
	codex := NodeFile(t, ".bin/codex")
	t.Run("shell", func(t *testing.T) {
		e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{shellRule}})
		out := runClient(t, t.TempDir(), agentEnv(codexHome(t, base, ""), "FAKE_KEY=sk-fake"), codex,
			"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "say something from the shell")
		if !strings.Contains(out, "all done") {
			t.Fatalf("codex said %q", out)
		}
		checkAgentRun(t, e, WireResponses, 2, "from-the-fake")
	})
	t.Run("mcp", func(t *testing.T) {
		mf := mcpfake.New()
		mcpURL, _ := mf.StartHTTP(t)
		e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{mcpRule}})
		out := runClient(t, t.TempDir(), agentEnv(codexHome(t, base, mcpURL), "FAKE_KEY=sk-fake"), codex,
			"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "look up k1")
		if !strings.Contains(out, "found it") {
			t.Fatalf("codex said %q", out)
		}
		if calls := mf.Calls(); len(calls) != 1 || calls[0].Tool != "lookup" || calls[0].Args["key"] != "k1" {
			t.Fatalf("MCP calls %+v", calls)
		}
		checkAgentRun(t, e, WireResponses, 1, "value-of-k1")
	})
}

// TestClaudeCodeOnMessages: Claude Code runs a prompt against the fake's Messages API:
// the shell rule's two rounds of Bash, whose real output it sends back as tool
// results, then the answer; and a call of an MCP server's tool.
func TestClaudeCodeOnMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Claude Code")
	}
	claude := NodeFile(t, ".bin/claude")
	run := func(t *testing.T, rule ToolRule, extra ...string) (*Engine, string) {
		e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{rule}})
		env := agentEnv(t.TempDir(), "ANTHROPIC_BASE_URL="+strings.TrimSuffix(base, "/v1"), "ANTHROPIC_API_KEY=sk-ant-fake",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
		// The prompt first: --allowedTools takes every argument after it.
		out := runClient(t, t.TempDir(), env, claude, append([]string{"-p", "do it", "--output-format", "json"}, extra...)...)
		var res struct {
			IsError bool   `json:"is_error"`
			Result  string `json:"result"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.IsError {
			t.Fatalf("claude: %v %s", err, out)
		}
		return e, res.Result
	}
	t.Run("shell", func(t *testing.T) {
		e, said := run(t, shellRule, "--allowedTools", "Bash")
		if said != "all done" {
			t.Fatalf("claude said %q", said)
		}
		checkAgentRun(t, e, WireMessages, 2, "from-the-fake")
	})
	t.Run("mcp", func(t *testing.T) {
		mf := mcpfake.New()
		mcpURL, _ := mf.StartHTTP(t)
		e, said := run(t, mcpRule, "--mcp-config", `{"mcpServers":{"fake":{"type":"http","url":"`+mcpURL+`"}}}`,
			"--strict-mcp-config", "--allowedTools", "mcp__fake__lookup")
		if said != "found it" {
			t.Fatalf("claude said %q", said)
		}
		if calls := mf.Calls(); len(calls) != 1 || calls[0].Tool != "lookup" {
			t.Fatalf("MCP calls %+v", calls)
		}
		checkAgentRun(t, e, WireMessages, 1, "value-of-k1")
	})
}
