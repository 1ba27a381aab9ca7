package luft_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/luft-run/luft"
)

// callMCP calls a tool and decodes its structured content into out.
func callMCP(t *testing.T, c *client.Client, name string, args map[string]any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %+v", name, res.Content)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %s: %v", name, b, err)
	}
}

// The Engine's MCP handler runs workflows and sub-agents as the Engine's runs.
func TestMCPHandler(t *testing.T) {
	eng, err := luft.New(luft.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h, err := eng.MCPHandler()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	c, err := client.NewStreamableHttpClient(hs.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "embed-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	var started struct {
		RunID string `json:"run_id"`
	}
	callMCP(t, c, "workflow_execute", map[string]any{"script": `function main() report(agent{prompt = "hi"}.ok) end`}, &started)
	var done struct {
		Status string `json:"status"`
		Report any    `json:"report"`
	}
	callMCP(t, c, "workflow_await", map[string]any{"run_id": started.RunID, "timeout_s": 60}, &done)
	if done.Status != "completed" || done.Report != true {
		t.Fatalf("workflow_await: %+v", done)
	}
	var sp struct{ Handle string }
	callMCP(t, c, "spawn", map[string]any{"prompt": "say hi"}, &sp)
	var aw struct {
		Handles []struct{ Status string }
	}
	callMCP(t, c, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &aw)
	if len(aw.Handles) != 1 || aw.Handles[0].Status != "completed" {
		t.Fatalf("await: %+v", aw)
	}
	// Both are the Engine's runs.
	for _, id := range []string{started.RunID, sp.Handle} {
		if info, err := eng.Status(ctx, id); err != nil || info.Status != luft.StatusCompleted {
			t.Errorf("Status(%s) = %+v, %v", id, info, err)
		}
	}
	// A closed Engine makes no handler.
	eng.Close()
	if _, err := eng.MCPHandler(); err != luft.ErrClosed {
		t.Errorf("MCPHandler after Close: %v, want ErrClosed", err)
	}
}

// The Engine's proxy passes an own-loop agent's turns to the configured upstream through
// the Engine's scheduler and records the run; without an openai backend it refuses.
func TestProxyHandler(t *testing.T) {
	if _, err := func() (http.Handler, error) {
		eng, err := luft.New(luft.Options{StateDir: t.TempDir(), Getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		return eng.ProxyHandler()
	}(); err == nil || !strings.Contains(err.Error(), "no backend for the proxy") {
		t.Fatalf("ProxyHandler without a backend: %v", err)
	}

	cfg, stop := noteModel(t.TempDir())
	defer stop()
	eng, err := luft.New(luft.Options{StateDir: t.TempDir(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	h, err := eng.ProxyHandler()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-1","messages":[{"role":"user","content":"hello"}],"max_tokens":8}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-luft-caller", "tester")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("proxied turn: %d %s", resp.StatusCode, body)
	}
	run := resp.Header.Get("x-luft-run")
	if run == "" {
		t.Fatal("no x-luft-run header")
	}
	// Close ends the proxy's runs and writes what its recorder holds: the run is in
	// the state dir, with its turn.
	dir := eng.StateDir()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := luft.New(luft.Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	info, err := again.Status(context.Background(), run)
	if err != nil || info.Workflow != "proxy:tester" || info.Agents.OK != 1 || info.Status == luft.StatusRunning {
		t.Fatalf("Status(%s) = %+v, %v; want an ended proxy:tester with one turn", run, info, err)
	}
}
