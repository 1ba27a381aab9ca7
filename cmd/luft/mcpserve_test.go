package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	luftmcp "github.com/luft-run/luft/mcp"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// fourSteps calls four mock agents one after the other: with LUFT_MOCK_LATENCY_MS it runs
// long enough to restart the daemon in its middle.
const fourSteps = `
function main()
  local n = 0
  for i = 1, 4 do
    local r = agent{ name = "step " .. i, prompt = "step " .. i }
    if r.ok then n = n + 1 end
  end
  report({ steps = n, who = args.who })
end
`

// mcpServe starts `luft mcp serve ARGS` in dt's dir as an MCP client's child would be.
func (dt *daemonTest) mcpServe(args ...string) *client.Client {
	dt.t.Helper()
	c, err := dt.startMCPServe(args...)
	if err != nil {
		dt.t.Fatal(err)
	}
	return c
}

// startMCPServe is mcpServe for any goroutine: it returns its failure.
func (dt *daemonTest) startMCPServe(args ...string) (*client.Client, error) {
	c, _, err := dt.startMCPServeCmd(args...)
	return c, err
}

// startMCPServeCmd is startMCPServe that also returns the luft mcp serve process.
func (dt *daemonTest) startMCPServeCmd(args ...string) (*client.Client, *exec.Cmd, error) {
	env := testEnv(nil, dt.env...)
	var proc *exec.Cmd
	c, err := client.NewStdioMCPClientWithOptions(luftBinary(dt.t), env,
		append([]string{"--state-dir", dt.state, "mcp", "serve"}, args...),
		transport.WithCommandFunc(func(ctx context.Context, command string, env, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env, cmd.Dir = env, dt.dir
			proc = cmd
			return cmd, nil
		}))
	if err != nil {
		return nil, nil, err
	}
	c2, err := dt.initMCP(c)
	return c2, proc, err
}

// initMCP initializes client c of luft mcp serve, closed when the test ends.
func (dt *daemonTest) initMCP(c *client.Client) (*client.Client, error) {
	dt.t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "luft-cli-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	// As clients do: the relay learns from the list which calls it may send again.
	if _, err := c.ListTools(ctx, mcp.ListToolsRequest{}); err != nil {
		return nil, fmt.Errorf("tools/list: %w", err)
	}
	return c, nil
}

// mcpCall calls a tool that must succeed and decodes its structured content.
func mcpCall(t *testing.T, c *client.Client, name string, args map[string]any, out any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var txt strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			txt.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, txt.String())
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %s: %v", name, b, err)
		}
	}
	return txt.String()
}

type mcpRun struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	Agents struct {
		OK     int `json:"ok"`
		Cached int `json:"cached"`
	} `json:"agents"`
	Report map[string]any `json:"report"`
}

// luft mcp serve starts the daemon when none runs and relays to it: a workflow file
// relative to the client's directory is executed and awaited. The daemon is then killed
// in the middle of a run; the next await reaches a daemon started again, which resumed
// the run, and waits for its end without redoing the finished calls.
func TestMCPServeRelaysToTheDaemon(t *testing.T) {
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=300")
	if err := os.WriteFile(filepath.Join(dt.dir, "steps.lua"), []byte(fourSteps), 0o600); err != nil {
		t.Fatal(err)
	}
	c := dt.mcpServe()
	info, err := daemon.ReadInfo(dt.state)
	if err != nil {
		t.Fatalf("no daemon started by mcp serve: %v", err)
	}
	dt.pids[info.PID] = true
	var files struct {
		Files []struct{ Path string } `json:"files"`
	}
	mcpCall(t, c, "workflow_list_files", nil, &files)
	if len(files.Files) != 1 || files.Files[0].Path != "steps.lua" {
		t.Errorf("files in the client's dir: %+v", files)
	}
	var ex mcpRun
	mcpCall(t, c, "workflow_execute", map[string]any{"path": "steps.lua", "args": map[string]any{"who": "relay"}}, &ex)
	// Kill the daemon once the first step is journaled (polling the external process).
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st mcpRun
		mcpCall(t, c, "workflow_status", map[string]any{"run_id": ex.RunID}, &st)
		if st.Agents.OK >= 1 {
			if st.Status != "running" {
				t.Fatalf("the run ended before the daemon could be killed: %+v (raise the latency)", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no step finished within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for processRunning(info.PID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// It is gone: its pid may soon be another process's (pid_max can be as low as 32768).
	delete(dt.pids, info.PID)
	var done mcpRun
	mcpCall(t, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 120}, &done)
	if again, err := daemon.ReadInfo(dt.state); err == nil {
		dt.pids[again.PID] = true
		if again.PID == info.PID {
			t.Errorf("the same daemon pid %d after the kill", again.PID)
		}
	} else {
		t.Errorf("no daemon after the await: %v", err)
	}
	if done.Status != "completed" || done.Report["steps"] != float64(4) || done.Report["who"] != "relay" {
		t.Fatalf("awaited after the restart: %+v", done)
	}
	if done.Agents.Cached < 1 {
		t.Errorf("the resumed run redid its finished calls: %+v", done)
	}
}

// The daemon serves MCP over streamable HTTP at /mcp with the API's token and Origin
// rules; an MCP session there is the caller of the runs it starts.
func TestMCPOverDaemonHTTP(t *testing.T) {
	dt := newDaemonTest(t)
	info := dt.start("--listen", "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + info.Addr + "/mcp"
	for _, tc := range []struct {
		hdr  map[string]string
		want int
	}{
		{map[string]string{}, http.StatusUnauthorized},
		{map[string]string{"Authorization": "Bearer wrong"}, http.StatusUnauthorized},
		{map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(tok)), "Origin": "http://evil.example"}, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%v: HTTP %d, want %d", tc.hdr, resp.StatusCode, tc.want)
		}
	}
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(tok))}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "http-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	if c.GetSessionId() == "" {
		t.Fatalf("no MCP session over HTTP (protocol %s): sessions are the callers", c.ProtocolVersion())
	}
	var ex, done mcpRun
	mcpCall(t, c, "workflow_execute", map[string]any{"script": fourSteps, "args": map[string]any{"who": "http"}}, &ex)
	mcpCall(t, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done)
	if done.Status != "completed" || done.Report["who"] != "http" {
		t.Fatalf("over HTTP: %+v", done)
	}
	out, _, code := dt.luft("status", "--json", ex.RunID)
	if code != 0 || !strings.Contains(out, ex.RunID) {
		t.Errorf("luft status of the MCP run: exit %d\n%s", code, out)
	}
	logText, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile))
	if !strings.Contains(string(logText), "caller "+luftmcp.SessionCaller(c.GetSessionId())) || strings.Contains(string(logText), c.GetSessionId()) {
		t.Errorf("the daemon did not host the run for the MCP session %s (by the digest of its id, never the id):\n%s", c.GetSessionId(), logText)
	}
}

// luft mcp serve --standalone hosts the runs itself; when the client goes away it
// suspends the runs still going.
func TestMCPServeStandalone(t *testing.T) {
	dt := newDaemonTest(t)
	c := dt.mcpServe("--standalone")
	var ex, done mcpRun
	mcpCall(t, c, "workflow_execute", map[string]any{"script": fourSteps}, &ex)
	mcpCall(t, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done)
	if done.Status != "completed" || done.Report["steps"] != float64(4) {
		t.Fatalf("standalone: %+v", done)
	}
	if _, err := os.Stat(filepath.Join(dt.state, daemon.SocketFile)); err == nil {
		t.Error("--standalone started a daemon")
	}
}

// Two clients starting luft mcp serve at once start one daemon between them, and both
// reach it.
func TestMCPServeStartsOneDaemon(t *testing.T) {
	dt := newDaemonTest(t)
	type started struct {
		c   *client.Client
		err error
	}
	clients := make(chan started, 2)
	for range 2 {
		go func() {
			c, err := dt.startMCPServe()
			clients <- started{c, err}
		}()
	}
	a, b := <-clients, <-clients
	if a.err != nil || b.err != nil {
		t.Fatalf("luft mcp serve: %v, %v", a.err, b.err)
	}
	info, err := daemon.ReadInfo(dt.state)
	if err != nil {
		t.Fatal(err)
	}
	dt.pids[info.PID] = true
	for _, c := range []*client.Client{a.c, b.c} {
		var page struct {
			Runs []mcpRun `json:"runs"`
		}
		mcpCall(t, c, "workflow_list_runs", nil, &page)
	}
	logText, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile))
	if n := strings.Count(string(logText), "started: pid"); n != 1 {
		t.Errorf("%d daemons started:\n%s", n, logText)
	}
}

// luft mcp serve --standalone writes every progress notification of a call before the
// call's result: a client reading the raw stream never sees a progress for an await it
// already has the answer of. Each round spawns mock sub-agents and awaits them with a
// progressToken; the last "settled" progress is sent just before await answers.
func TestMCPServeStandaloneProgressBeforeResult(t *testing.T) {
	dt := newDaemonTest(t)
	cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "mcp", "serve", "--standalone")
	cmd.Dir, cmd.Env = dt.dir, testEnv(nil, dt.env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	lines := make(chan map[string]any, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	id := 0
	send := func(method string, params any) int {
		id++
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := in.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// answer reads up to the result of call want; progress of an answered call fails.
	answered := map[float64]bool{}
	answer := func(want int) map[string]any {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatal("luft mcp serve closed its output")
				}
				if m["method"] == "notifications/progress" {
					tok, _ := m["params"].(map[string]any)["progressToken"].(float64)
					if answered[tok] {
						t.Fatalf("a progress notification of call %v came after its result: %v", tok, m)
					}
					continue
				}
				if got, ok := m["id"].(float64); ok {
					answered[got] = true
					if int(got) == want {
						return m
					}
				}
			case <-timeout:
				t.Fatalf("no answer to call %d", want)
			}
		}
	}
	answer(send("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}}))
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	in.Write(append(b, '\n'))
	for round := 0; round < 15; round++ {
		var handles []any
		for i := 0; i < 3; i++ {
			res := answer(send("tools/call", map[string]any{"name": "spawn", "arguments": map[string]any{"prompt": fmt.Sprintf("part %d", i), "backend": "mock"}}))
			sc, _ := res["result"].(map[string]any)["structuredContent"].(map[string]any)
			if sc["handle"] == nil {
				t.Fatalf("spawn: %v", res)
			}
			handles = append(handles, sc["handle"])
		}
		next := id + 1
		res := answer(send("tools/call", map[string]any{"name": "await", "arguments": map[string]any{"handles": handles, "timeout_s": 30},
			"_meta": map[string]any{"progressToken": next}}))
		if r, _ := res["result"].(map[string]any); r == nil || r["isError"] == true {
			t.Fatalf("await: %v", res)
		}
	}
	// The stream's tail: a progress notification still on its way shows here.
	in.Close()
	for m := range lines {
		if m["method"] == "notifications/progress" {
			tok, _ := m["params"].(map[string]any)["progressToken"].(float64)
			if answered[tok] {
				t.Fatalf("a progress notification of call %v came after its result", tok)
			}
		}
	}
}
