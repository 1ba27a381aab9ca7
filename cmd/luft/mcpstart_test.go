package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// A configured MCP server that cannot start fails only the agents that ask for its tools:
// an agent using another server's tools runs, end to end.
func TestBrokenMCPServerFailsOnlyItsOwnAgents(t *testing.T) {
	t.Parallel()
	_, _, url := startEngine(t, testkit.Config{ToolRules: []testkit.ToolRule{
		{Match: "add two and three", Calls: []testkit.ScriptedCall{{Name: "web__add", Arguments: `{"a":2,"b":3}`}}, Reply: "sum done"},
		{Match: "use the broken one", Calls: []testkit.ScriptedCall{{Name: "broken__lookup", Arguments: `{"key":"x"}`}}, Reply: "never"},
	}})
	web := mcpfake.New()
	webURL, stop := web.StartHTTP(t)
	t.Cleanup(stop)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(url, "fake-1", fmt.Sprintf("[mcp_servers.broken]\ncommand = %q\n[mcp_servers.web]\nurl = %q\n",
			filepath.Join(dir, "no-such-mcp-server"), webURL)),
		"wf.lua": `function main()
  local a = agent{prompt = "add two and three", tools = {"web__add"}}
  local b = agent{prompt = "use the broken one", tools = {"broken__lookup"}}
  report({a = a.text, broken = b.ok, err = b.error})
end`,
	})
	out := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", "wf.lua")
	if !strings.Contains(out, `"a": "sum done"`) || !strings.Contains(out, `"broken": false`) || !strings.Contains(out, `mcp server \"broken\"`) {
		t.Fatalf("report:\n%s", out)
	}
	if calls := web.Calls(); len(calls) != 1 || calls[0].Tool != "add" {
		t.Fatalf("the web server got %+v", calls)
	}
}
