package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// held is a backend whose turns wait until the test lets one through (or the run is
// stopped): a run that stays running as long as a test needs.
type held struct {
	started chan struct{}
	release chan struct{}
}

func newHeld() *held { return &held{started: make(chan struct{}, 100), release: make(chan struct{})} }

func (h *held) ID() string { return "held" }

func (h *held) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	err := call.Do(ctx, adapters.TurnCost{}, func(ctx context.Context) adapters.TurnReport {
		h.started <- struct{}{}
		select {
		case <-h.release:
			return adapters.TurnReport{}
		case <-ctx.Done():
			return adapters.TurnReport{Err: context.Cause(ctx)}
		}
	})
	if err != nil {
		return agent.Result{}, err
	}
	return agent.Result{Status: agent.StatusOK, Text: "held ok", Backend: "held"}, nil
}

// env is a Server over a fresh Service with the mock and held backends, and a client
// connected in-process.
type env struct {
	srv  *Server
	svc  *runtime.Service
	st   storage.Store
	held *held
	c    *client.Client
	dir  string
}

func newEnv(t *testing.T, tweak ...func(*Options)) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHeld()
	reg := adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}), h)
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range svc.Live() {
			r.Cancel()
			<-r.Done()
		}
	})
	opts := Options{Service: svc, Host: ServiceHost{Service: svc, Backends: reg}, Version: "test", Dir: dir,
		mcpOptions: []server.ServerOption{server.WithOutputSchemaValidation()}}
	for _, f := range tweak {
		f(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewInProcessClient(srv.MCPServer())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, initRequest()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{srv: srv, svc: svc, st: st, held: h, c: c, dir: dir}
}

func initRequest() mcp.InitializeRequest {
	var r mcp.InitializeRequest
	r.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	r.Params.ClientInfo = mcp.Implementation{Name: "luft-test", Version: "1"}
	return r
}

// callTool calls a tool and returns its result; a protocol error fails the test.
func callTool(t *testing.T, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// ok calls a tool that must succeed and decodes its structured content into out.
func ok(t *testing.T, c *client.Client, name string, args map[string]any, out any) string {
	t.Helper()
	res := callTool(t, c, name, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", name, args, text(res))
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return text(res)
}

// fails calls a tool that must answer with a tool error containing each of want.
func fails(t *testing.T, c *client.Client, name string, args map[string]any, want ...string) {
	t.Helper()
	res := callTool(t, c, name, args)
	if !res.IsError {
		t.Fatalf("%s(%v): want a tool error, got %s", name, short(args), text(res))
	}
	for _, w := range want {
		if !strings.Contains(text(res), w) {
			t.Errorf("%s(%v): error %q lacks %q", name, short(args), text(res), w)
		}
	}
}

func short(args map[string]any) string {
	b, _ := json.Marshal(args)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

const helloScript = `
meta = { reasoning = "test", phases = { { label = "greet" } } }
function main()
  phase("greet")
  local r = agent{ name = "greeter", prompt = "say hi to " .. (args.name or "world") }
  log("greeted")
  report({ ok = r.ok, name = args.name or "world" })
end`

// heldScript runs one agent on the held backend: it runs until the test releases it.
const heldScript = `
function main()
  phase("wait")
  local r = agent{ backend = "held", prompt = "wait" }
  report({ text = r.text })
end`
