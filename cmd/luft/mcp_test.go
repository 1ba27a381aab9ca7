package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// Agents use the tools of upstream MCP servers from [mcp_servers]: a stdio server (this
// test binary as the fake) and a streamable HTTP one. Both fakes' ground-truth logs show
// the calls the model asked for, and the engine received their results.
func TestMCPToolsInAgents(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "look up alpha", Calls: []testkit.ScriptedCall{{Name: "files__lookup", Arguments: `{"key":"alpha"}`}}, Reply: "found it"},
		{Match: "add two and three", Calls: []testkit.ScriptedCall{{Name: "web__add", Arguments: `{"a":2,"b":3}`}}, Reply: "sum done"},
		{Match: "make it fail", Calls: []testkit.ScriptedCall{{Name: "web__fail", Arguments: `{}`}}, Reply: "handled"},
	}})
	web := mcpfake.New()
	webURL, stop := web.StartHTTP(t)
	t.Cleanup(stop)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stdioLog := filepath.Join(dir, "stdio-calls.jsonl")
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(url, "fake-1", fmt.Sprintf(`[mcp_servers.files]
command = %q
env = { %s = "1", %s = %q, GORACE = "atexit_sleep_ms=0" }
[mcp_servers.web]
url = %q
`, self, mcpfake.EnvStdio, mcpfake.EnvLog, stdioLog, webURL)),
		"wf.lua": `function main()
  local a = agent{prompt = "look up alpha", tools = {"files__lookup"}}
  local b = agent{prompt = "add two and three", tools = {"web__add", "web__fail"}}
  local c = agent{prompt = "make it fail", tools = {"web__fail"}}
  report({a = a.text, b = b.text, c = c.text})
end`,
		"builtin.lua": `function main() report(agent{prompt = "no tools here"}.ok) end`,
	})
	run := func(script string) string {
		t.Helper()
		return mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", script)
	}
	// A run whose agents ask for no upstream tool starts no server.
	run("builtin.lua")
	if _, err := os.Stat(stdioLog); err == nil {
		t.Fatal("the stdio server was started for a run that uses none of its tools")
	}
	if out := run("wf.lua"); !strings.Contains(out, `"a": "found it"`) || !strings.Contains(out, `"c": "handled"`) {
		t.Fatalf("report:\n%s", out)
	}
	results := map[string]string{}
	for _, r := range engine.Log() {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			results[string(r.Messages[0].Content)] = string(last.Content)
		}
	}
	if got := results["look up alpha"]; got != "value-of-alpha" {
		t.Errorf("stdio lookup gave the model %q", got)
	}
	if got := results["add two and three"]; got != "5" {
		t.Errorf("http add gave the model %q", got)
	}
	if got := results["make it fail"]; got != "error: "+mcpfake.FailMessage {
		t.Errorf("a failing upstream tool gave the model %q", got)
	}
	calls, err := mcpfake.ReadLog(stdioLog)
	if err != nil || len(calls) != 1 || calls[0].Tool != "lookup" || calls[0].Args["key"] != "alpha" {
		t.Errorf("the stdio fake received %+v (%v)", calls, err)
	}
	var webCalls []string
	for _, c := range web.Calls() {
		webCalls = append(webCalls, c.Tool)
	}
	if strings.Join(webCalls, ",") != "add,fail" {
		t.Errorf("the http fake received %v", webCalls)
	}
}
