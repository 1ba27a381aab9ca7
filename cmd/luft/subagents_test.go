package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// subagentDaemon is a daemon test whose luft.toml has the openai backend "local" on a
// fake engine whose agents asked to "keep a note" call write_file, destructive under the
// default approval policy (ask), in ws.
func subagentDaemon(t *testing.T, env ...string) (*daemonTest, *testkit.Engine, string) {
	t.Helper()
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "noted"},
	}})
	dt := newDaemonTest(t, append([]string{"OPENAI_API_KEY=k"}, env...)...)
	ws := filepath.Join(dt.dir, "ws")
	writeFiles(t, dt.dir, map[string]string{
		"ws/.keep":  "",
		"luft.toml": localBackend(url, "fake-1", fmt.Sprintf("[tools]\nworkspace = %q\n", ws)),
	})
	return dt, engine, ws
}

type subView struct {
	Handle  string `json:"handle"`
	Status  string `json:"status"`
	Output  any    `json:"output"`
	Error   string `json:"error"`
	Pending []struct {
		ApprovalID string `json:"approval_id"`
		Tool       string `json:"tool"`
		Arguments  string `json:"arguments"`
	} `json:"pending_approvals"`
}

type subAwait struct {
	Handles []subView `json:"handles"`
	Done    int       `json:"done"`
	Waiting int       `json:"awaiting_approval"`
}

// allowAll answers every elicitation with allow and counts them.
type allowAll struct {
	mu   sync.Mutex
	msgs []string
}

func (a *allowAll) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.mu.Lock()
	a.msgs = append(a.msgs, req.Params.Message)
	a.mu.Unlock()
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"allow": true}}}, nil
}

// Sub-agents through the daemon, over its streamable HTTP (a client that answers
// elicitations) and over the stdio relay (one that does not): a fan-out of mock
// sub-agents awaited together, an approval asked of the eliciting client, and one
// answered with the approve tool after luft status showed it waiting.
func TestMCPSubagentsThroughTheDaemon(t *testing.T) {
	dt, engine, ws := subagentDaemon(t)
	info := dt.start("--listen", "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	asker := &allowAll{}
	hc, err := client.NewStreamableHttpClient("http://"+info.Addr+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(tok))}))
	if err != nil {
		t.Fatal(err)
	}
	hc = client.NewClient(hc.GetTransport(), client.WithElicitationHandler(asker))
	t.Cleanup(func() { hc.Close() })
	if err := hc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "http-elicit", Version: "1"}
	init.Params.Capabilities.Elicitation = &mcp.ElicitationCapability{}
	if _, err := hc.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}

	var cat struct {
		Approval string `json:"approval"`
		Tools    []struct {
			Name        string `json:"name"`
			Destructive bool   `json:"destructive"`
		} `json:"tools"`
	}
	mcpCall(t, hc, "tools", nil, &cat)
	destructive := map[string]bool{}
	for _, tl := range cat.Tools {
		destructive[tl.Name] = tl.Destructive
	}
	if cat.Approval != "ask" || !destructive["write_file"] || destructive["read_file"] {
		t.Fatalf("tools: %+v", cat)
	}

	var handles []any
	for i := range 3 {
		var sp struct{ Handle string }
		mcpCall(t, hc, "spawn", map[string]any{"prompt": fmt.Sprintf("part %d", i), "backend": "mock"}, &sp)
		handles = append(handles, sp.Handle)
	}
	var all subAwait
	mcpCall(t, hc, "await", map[string]any{"handles": handles, "timeout_s": 60}, &all)
	if all.Done != 3 {
		t.Fatalf("await all: %+v", all)
	}

	var ran subAwait
	mcpCall(t, hc, "run", map[string]any{"prompt": "keep a note", "tools": []any{"write_file"}, "timeout_s": 60}, &ran)
	if ran.Handles[0].Status != "completed" || ran.Handles[0].Output != "noted" || len(asker.msgs) != 1 || !strings.Contains(asker.msgs[0], "write_file") {
		t.Fatalf("run with elicitation: %+v, asked %q", ran, asker.msgs)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("note.txt after the allowed call: %q %v", b, err)
	}

	sc := dt.mcpServe() // no elicitation: approve answers
	var sp struct{ Handle string }
	mcpCall(t, sc, "spawn", map[string]any{"prompt": "keep a note", "tools": []any{"write_file"}}, &sp)
	var parked subAwait
	mcpCall(t, sc, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &parked)
	if v := parked.Handles[0]; v.Status != "awaiting_approval" || len(v.Pending) != 1 || v.Pending[0].Tool != "write_file" {
		t.Fatalf("await without elicitation: %+v", parked)
	}
	out, _, code := dt.luft("status", "--json", sp.Handle)
	var st struct {
		Status  string `json:"status"`
		Pending []struct {
			ID   string `json:"approval_id"`
			Tool string `json:"tool"`
		} `json:"pending_approvals"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Status != "awaiting_approval" || len(st.Pending) != 1 ||
		st.Pending[0].ID != parked.Handles[0].Pending[0].ApprovalID {
		t.Fatalf("luft status: exit %d\n%s", code, out)
	}
	out, _, _ = dt.luft("list", "--status", "awaiting_approval")
	if !strings.Contains(out, sp.Handle) {
		t.Fatalf("luft list --status awaiting_approval:\n%s", out)
	}
	mcpCall(t, sc, "approve", map[string]any{"handle": sp.Handle, "allow": false}, nil)
	var after subAwait
	mcpCall(t, sc, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &after)
	if after.Handles[0].Status != "completed" {
		t.Fatalf("after decline: %+v", after)
	}
	declined := 0
	for _, r := range engine.Log() {
		if last := r.Messages[len(r.Messages)-1]; last.Role == "tool" && string(last.Content) == tools.DeclinedText {
			declined++
		}
	}
	if declined != 1 {
		t.Fatalf("the model was told of %d declined calls, want 1", declined)
	}

	// luft approve answers from the command line: the parked write runs.
	if err := os.Remove(filepath.Join(ws, "note.txt")); err != nil {
		t.Fatal(err)
	}
	mcpCall(t, sc, "spawn", map[string]any{"prompt": "keep a note", "tools": []any{"write_file"}}, &sp)
	mcpCall(t, sc, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &parked)
	if v := parked.Handles[0]; v.Status != "awaiting_approval" || len(v.Pending) != 1 || v.Pending[0].Tool != "write_file" {
		t.Fatalf("second write: %+v", parked)
	}
	if out, errOut, code := dt.luft("approve", sp.Handle, "--allow"); code != 0 || !strings.Contains(out, "write_file") {
		t.Fatalf("luft approve --allow: exit %d\n%s%s", code, out, errOut)
	}
	mcpCall(t, sc, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &after)
	if v := after.Handles[0]; v.Status != "completed" || v.Output != "noted" {
		t.Fatalf("after luft approve: %+v", after)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("note.txt after luft approve: %q %v", b, err)
	}
}

// A handle outlives the daemon: a sub-agent spawned before the daemon is killed is
// awaited to its end through a daemon started again; and a call waiting for approval
// when the daemon was killed is asked again, under the same id, after the restart.
func TestMCPSubagentSurvivesDaemonRestart(t *testing.T) {
	dt, _, ws := subagentDaemon(t, "LUFT_MOCK_LATENCY_MS=1500")
	c := dt.mcpServe()
	info, err := daemon.ReadInfo(dt.state)
	if err != nil {
		t.Fatal(err)
	}
	dt.pids[info.PID] = true
	var slow, note struct{ Handle string }
	mcpCall(t, c, "spawn", map[string]any{"prompt": "take your time", "backend": "mock"}, &slow)
	mcpCall(t, c, "spawn", map[string]any{"prompt": "keep a note", "tools": []any{"write_file"}}, &note)
	var parked subAwait
	mcpCall(t, c, "await", map[string]any{"handles": []any{note.Handle}, "timeout_s": 60}, &parked)
	if parked.Handles[0].Status != "awaiting_approval" || len(parked.Handles[0].Pending) != 1 {
		t.Fatalf("before the restart: %+v", parked)
	}
	first := parked.Handles[0].Pending[0].ApprovalID
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); processRunning(info.PID) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // an external process
	}
	var again subAwait
	mcpCall(t, c, "await", map[string]any{"handles": []any{note.Handle}, "timeout_s": 60}, &again)
	if next, err := daemon.ReadInfo(dt.state); err == nil {
		dt.pids[next.PID] = true
	}
	if v := again.Handles[0]; v.Status != "awaiting_approval" || len(v.Pending) != 1 || v.Pending[0].ApprovalID != first {
		t.Fatalf("after the restart: %+v (first asked as %s)", again, first)
	}
	mcpCall(t, c, "approve", map[string]any{"handle": note.Handle, "allow": true}, nil)
	var done subAwait
	mcpCall(t, c, "await", map[string]any{"handles": []any{slow.Handle, note.Handle}, "timeout_s": 60}, &done)
	if done.Done != 2 || done.Handles[0].Status != "completed" || done.Handles[1].Output != "noted" {
		t.Fatalf("after the restart: %+v", done)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("note.txt: %q %v", b, err)
	}
	out, _, _ := dt.luft("status", "--json", slow.Handle)
	if !strings.Contains(out, `"attempt": 2`) {
		t.Errorf("the slow sub-agent was not resumed by the new daemon:\n%s", out)
	}
}

// luft run without a terminal, hosted by the daemon (which parks approvals for MCP
// clients), does not wait for an answer no one can give: the call fails naming the
// setting, as it does in-process.
func TestUnattendedRunDoesNotWaitForApproval(t *testing.T) {
	dt, _, ws := subagentDaemon(t)
	dt.start()
	writeFiles(t, dt.dir, map[string]string{"note.lua": `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}}
  assert(r.ok, r.error)
  report(r.text)
end`})
	_, errOut, code := dt.luft("run", "-q", "-w", "note.lua")
	if code != 1 || !strings.Contains(errOut, "write_file is destructive and needs approval") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "note.txt")); !os.IsNotExist(err) {
		t.Fatal("the destructive tool ran without approval")
	}
	out, _, _ := dt.luft("list", "--json")
	if !strings.Contains(out, `"status": "completed"`) && !strings.Contains(out, `"status": "failed"`) {
		t.Fatalf("the run did not end:\n%s", out)
	}
}
