package setup

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// Each upstream server starts on the first use of its own tools: a server whose command
// cannot start fails only the agents that ask for its tools, never those that use
// another server's tools or only the built-ins.
func TestUpstreamServersStartOnFirstUseOfTheirTools(t *testing.T) {
	fake := mcpfake.New()
	url, stop := fake.StartHTTP(t)
	t.Cleanup(stop)
	ts, err := newToolset(config.Config{
		Tools: config.Tools{Workspace: t.TempDir()},
		MCPServers: map[string]config.MCPServer{
			"broken": {Command: "/nonexistent/luft-no-such-mcp-server"},
			"good":   {URL: url},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		names []string
		want  string // "" resolves; else in the error
	}{
		{names: []string{"read_file"}},
		{names: []string{"good__lookup", "read_file"}},
		{names: []string{"broken__lookup"}, want: `mcp server "broken" (command /nonexistent/luft-no-such-mcp-server): start`},
		{names: []string{"good__add"}},
		{names: []string{"good__lookup", "broken__lookup"}, want: `mcp server "broken"`},
	} {
		got, err := ts.Resolve(ctx, tc.names)
		switch {
		case tc.want == "" && (err != nil || len(got) != len(tc.names)):
			t.Errorf("%v: %d tools, %v", tc.names, len(got), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: err %v, want it to name %q", tc.names, err, tc.want)
		}
	}
	out, err := func() (string, error) {
		got, err := ts.Resolve(ctx, []string{"good__lookup"})
		if err != nil {
			return "", err
		}
		return got[0].Call(ctx, []byte(`{"key":"alpha"}`))
	}()
	if err != nil || out != "value-of-alpha" {
		t.Fatalf("good__lookup after the broken server failed: %q %v", out, err)
	}
}

// An upstream tool named in [tools] destructive must belong to a configured server; it is
// checked when luft starts, not when (or if) the server does.
func TestDestructiveUpstreamToolNeedsItsServer(t *testing.T) {
	_, err := newToolset(config.Config{Tools: config.Tools{Workspace: t.TempDir(), Destructive: []string{"search__drop"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `[tools] destructive names "search__drop", but no [mcp_servers.search] is configured`) {
		t.Fatalf("err %v", err)
	}
}

// [tools] is read once: the backends' tool set keeps every destructive name (upstream
// ones included, for when their server starts), the built-ins alone (the MCP door's
// catalog) only theirs; protected paths are the caller's.
func TestToolsConfig(t *testing.T) {
	cfg := config.Config{Tools: config.Tools{Workspace: "/w", Approval: "deny", AllowCommands: []string{"go"},
		Destructive: []string{"write_file", "files__delete"}}}
	full := ToolsConfig(cfg, []string{"/s"})
	if full.Workspace != "/w" || full.Approval != "deny" || !slices.Equal(full.AllowCommands, []string{"go"}) ||
		!slices.Equal(full.Destructive, []string{"write_file", "files__delete"}) || !slices.Equal(full.Protected, []string{"/s"}) {
		t.Fatalf("ToolsConfig: %+v", full)
	}
	if b := BuiltinToolsConfig(cfg, nil); !slices.Equal(b.Destructive, []string{"write_file"}) || b.Protected != nil || b.Workspace != "/w" {
		t.Fatalf("BuiltinToolsConfig: %+v", b)
	}
}
