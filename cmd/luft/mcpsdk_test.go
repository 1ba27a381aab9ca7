package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/testkit"
)

// sdkWorkflow is what the TypeScript client executes and awaits: two phases of mock
// agents, four steps of LUFT_MOCK_LATENCY_MS each, so the await (called right after the
// execute) sees the agent counts change several times and reports progress.
const sdkWorkflow = `
meta = { phases = {
  { label = "gather", description = "three mock agents in parallel" },
  { label = "merge", description = "three agents merge, one after the other" },
} }

function main()
  phase("gather")
  local got = parallel({ "a", "b", "c" }, function(x)
    return agent{ name = "gather " .. x, prompt = "gather " .. x }.ok
  end)
  phase("merge")
  local merged = 0
  for i = 1, 3 do
    if agent{ name = "merge " .. i, prompt = "merge step " .. i }.ok then merged = merged + 1 end
  end
  report({ gathered = #got, merged = merged, who = args.who })
end
`

// sdkResult is what internal/testkit/node/mcp-e2e.mjs prints.
type sdkResult struct {
	Server struct{ Name, Version string }
	Tools  []struct {
		Name            string
		ReadOnly        *bool
		HasOutputSchema bool
	}
	Resources    []string
	Templates    []string
	ExamplesText string
	Execute      struct {
		RunID  string `json:"run_id"`
		Status string
	}
	Awaited  mcpRun
	Progress []struct {
		Progress float64
		Total    *float64
		Message  string
	}
	Spawned  []string
	AwaitAll struct {
		Handles []struct {
			Handle, Status string
			Output         any
		}
		Done int
	}
	Approval struct {
		Handle string
		Result struct {
			Handles []struct {
				Status string
				Output any
			}
		}
		Elicitations []struct {
			Message         string
			RequestedSchema struct {
				Properties map[string]any
				Required   []string
			}
		}
	}
}

// The official MCP TypeScript SDK's client (pinned in internal/testkit/node) drives luft
// over stdio (`luft mcp serve`, which starts the daemon) and over the daemon's streamable
// HTTP /mcp with its token: it lists tools and resources, executes a workflow and awaits
// it with progress notifications, spawns three sub-agents and awaits them all, and answers
// an elicitation that approves a sub-agent's write_file.
func TestMCPTypeScriptSDK(t *testing.T) {
	node := testkit.Node(t)
	testkit.NodeFile(t, "@modelcontextprotocol/sdk/package.json")
	script := filepath.Join(testkit.NodeDir(), "mcp-e2e.mjs")
	_, _, engineURL := startEngine(t, testkit.Config{ToolRules: []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello from the sdk test"}`}}, Reply: "noted"},
	}})
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=250", "OPENAI_API_KEY=k")
			ws := filepath.Join(dt.dir, "ws")
			writeFiles(t, dt.dir, map[string]string{
				"luft.toml": fmt.Sprintf("default_backend = \"mock\"\n\n[backends.mock]\ntype = \"mock\"\n\n[backends.fake]\ntype = \"openai\"\nbase_url = %q\nmodel = \"fake-1\"\n\n"+
					"[tools]\nworkspace = %q\napproval = \"ask\"\n", engineURL, ws),
				"ws/.keep": "",
			})
			env := append(slices.Clone(dt.env), "E2E_WORKFLOW="+sdkWorkflow, "E2E_APPROVAL_BACKEND=fake")
			var args []string
			if mode == "stdio" {
				args = []string{script, "stdio", luftBinary(t), "--state-dir", dt.state, "mcp", "serve"}
			} else {
				info := dt.start("--listen", "127.0.0.1:0")
				tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
				if err != nil {
					t.Fatal(err)
				}
				args = []string{script, "http", "http://" + info.Addr + "/mcp"}
				env = append(env, "LUFT_TOKEN="+strings.TrimSpace(string(tok)))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, args...)
			cmd.Dir, cmd.Env = dt.dir, testEnv(nil, env...)
			cmd.WaitDelay = 5 * time.Second
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if info, ierr := daemon.ReadInfo(dt.state); ierr == nil {
				dt.pids[info.PID] = true // started by luft mcp serve: stopped by the cleanup
			}
			if err != nil {
				t.Fatalf("node mcp-e2e.mjs %s: %v\nstderr:\n%s", mode, err, tail(stderr.String(), 4000))
			}
			var got sdkResult
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("mcp-e2e.mjs printed no result: %v\n%s\nstderr:\n%s", err, stdout.String(), tail(stderr.String(), 4000))
			}
			t.Logf("%s: %d tools, %d progress notifications (last %+v), %d elicitation(s)", mode, len(got.Tools), len(got.Progress),
				got.Progress[max(len(got.Progress)-1, 0):], len(got.Approval.Elicitations))
			checkSDKResult(t, mode, got, ws)
		})
	}
}

// readOnlyTools are tools whose readOnlyHint the SDK client must see as given.
var readOnlyTools = map[string]bool{
	"workflow_status": true, "workflow_events": true, "workflow_list_runs": true,
	"workflow_execute": false, "workflow_cancel": false, "spawn": false, "cancel": false, "approve": false,
}

func checkSDKResult(t *testing.T, mode string, got sdkResult, ws string) {
	t.Helper()
	if got.Server.Name != "luft" {
		t.Errorf("server info: %+v", got.Server)
	}
	tools := map[string]bool{}
	for _, tl := range got.Tools {
		tools[tl.Name] = true
		if !tl.HasOutputSchema {
			t.Errorf("tool %s has no output schema", tl.Name)
		}
		ro := tl.ReadOnly != nil && *tl.ReadOnly
		if want, ok := readOnlyTools[tl.Name]; ok && ro != want {
			t.Errorf("tool %s: readOnlyHint %v, want %v", tl.Name, ro, want)
		}
	}
	for _, name := range []string{"workflow_execute", "workflow_status", "workflow_events", "workflow_await", "workflow_cancel",
		"workflow_list_runs", "workflow_list_files", "workflow_validate", "spawn", "await", "run", "status", "cancel", "approve", "tools"} {
		if !tools[name] {
			t.Errorf("tools/list lacks %s (got %v)", name, got.Tools)
		}
	}
	if len(got.Resources) < 2 || !slices.ContainsFunc(got.Resources, func(u string) bool { return strings.Contains(u, "skill") }) {
		t.Errorf("resources: %v (want the skill and the examples list)", got.Resources)
	}
	if !slices.Contains(got.Templates, "luft://example/{name}") {
		t.Errorf("resource templates: %v", got.Templates)
	}
	if !strings.Contains(got.ExamplesText, "hello") {
		t.Errorf("the examples resource does not list the examples: %.300s", got.ExamplesText)
	}

	if got.Execute.RunID == "" || got.Awaited.Status != "completed" || got.Awaited.Report["gathered"] != float64(3) ||
		got.Awaited.Report["merged"] != float64(3) || got.Awaited.Report["who"] != mode {
		t.Errorf("workflow_execute %+v, then workflow_await: %+v", got.Execute, got.Awaited)
	}
	if len(got.Progress) == 0 {
		t.Error("workflow_await sent no progress notifications")
	}
	for i, p := range got.Progress {
		if i > 0 && p.Progress <= got.Progress[i-1].Progress {
			t.Errorf("progress did not grow: %+v", got.Progress)
		}
	}
	if len(got.Progress) > 0 && !slices.ContainsFunc(got.Progress, func(p struct {
		Progress float64
		Total    *float64
		Message  string
	}) bool {
		return strings.Contains(p.Message, "phase") && strings.Contains(p.Message, "agents")
	}) {
		t.Errorf("no progress message names the phase and the agent counts: %+v", got.Progress)
	}

	if len(got.Spawned) != 3 || len(got.AwaitAll.Handles) != 3 || got.AwaitAll.Done != 3 {
		t.Fatalf("three sub-agents awaited together: spawned %v, await %+v", got.Spawned, got.AwaitAll)
	}
	for i, h := range got.AwaitAll.Handles {
		if h.Handle != got.Spawned[i] || h.Status != "completed" || h.Output == nil {
			t.Errorf("sub-agent %d: %+v", i+1, h)
		}
	}

	el := got.Approval.Elicitations
	if len(el) != 1 || !strings.Contains(el[0].Message, "write_file") || el[0].RequestedSchema.Properties["allow"] == nil ||
		!slices.Contains(el[0].RequestedSchema.Required, "allow") {
		t.Fatalf("elicitations: %+v (want one, for write_file, a form with allow)", el)
	}
	res := got.Approval.Result.Handles
	if len(res) != 1 || res[0].Status != "completed" || res[0].Output != "noted" {
		t.Fatalf("the approved sub-agent: %+v", got.Approval.Result)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "hello from the sdk test" {
		t.Errorf("the approved write_file did not write note.txt: %q %v", b, err)
	}
}

// sdkAnswer is one call as internal/testkit/node/mcp-scope.mjs prints it.
type sdkAnswer struct {
	IsError    bool
	Text       string
	Structured map[string]any
	RPCError   *struct {
		Code    *int
		Message string
	}
}

// The official MCP TypeScript SDK's client, declaring MCP roots, over stdio (`luft mcp
// serve`, relayed to the daemon) and over the daemon's HTTP /mcp: paths reach only .lua
// files inside its roots (asked again after notifications/roots/list_changed), a .env is
// refused without being quoted, a 40 MiB argument is a JSON-RPC error on a session that
// goes on, and a second session reads the first one's run but may not cancel it.
func TestMCPTypeScriptSDKScope(t *testing.T) {
	node := testkit.Node(t)
	testkit.NodeFile(t, "@modelcontextprotocol/sdk/package.json")
	script := filepath.Join(testkit.NodeDir(), "mcp-scope.mjs")
	const secret = "sk-scope-test-0123456789"
	held := "function main()\n  for i = 1, 200 do agent{ prompt = \"step \" .. i } end\nend\n"
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=200")
			root, other := filepath.Join(dt.dir, "root"), filepath.Join(dt.dir, "other")
			writeFiles(t, dt.dir, map[string]string{
				"luft.toml":      "default_backend = \"mock\"\n\n[backends.mock]\ntype = \"mock\"\n",
				"root/hello.lua": "function main() report({ ok = true }) end\n",
				"root/.env":      "OPENAI_API_KEY=" + secret + "\n",
				"workspace.lua":  "function main() report({ ok = true }) end\n",
				"other/.keep":    "",
			})
			env := append(slices.Clone(dt.env), "E2E_ROOT="+root, "E2E_OTHER_ROOT="+other, "E2E_INSIDE="+filepath.Join(root, "hello.lua"),
				"E2E_OUTSIDE="+filepath.Join(dt.dir, "workspace.lua"), "E2E_ENV="+filepath.Join(root, ".env"), "E2E_HELD="+held)
			var args []string
			if mode == "stdio" {
				args = []string{script, "stdio", luftBinary(t), "--state-dir", dt.state, "mcp", "serve"}
			} else {
				info := dt.start("--listen", "127.0.0.1:0")
				tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
				if err != nil {
					t.Fatal(err)
				}
				args = []string{script, "http", "http://" + info.Addr + "/mcp"}
				env = append(env, "LUFT_TOKEN="+strings.TrimSpace(string(tok)))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, args...)
			cmd.Dir, cmd.Env = dt.dir, testEnv(nil, env...)
			cmd.WaitDelay = 5 * time.Second
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if info, ierr := daemon.ReadInfo(dt.state); ierr == nil {
				dt.pids[info.PID] = true
			}
			if err != nil {
				t.Fatalf("node mcp-scope.mjs %s: %v\nstderr:\n%s", mode, err, tail(stderr.String(), 4000))
			}
			var got map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("mcp-scope.mjs printed no result: %v\n%s", err, tail(stdout.String(), 2000))
			}
			answer := func(key string) sdkAnswer {
				b, _ := json.Marshal(got[key])
				var a sdkAnswer
				_ = json.Unmarshal(b, &a)
				if strings.Contains(string(b), secret) {
					t.Errorf("%s quotes the .env: %s", key, b)
				}
				return a
			}
			refused := func(key string, want ...string) {
				t.Helper()
				a := answer(key)
				if !a.IsError {
					t.Errorf("%s: not refused: %+v", key, a)
				}
				for _, w := range want {
					if !strings.Contains(a.Text, w) {
						t.Errorf("%s: %q lacks %q", key, a.Text, w)
					}
				}
			}
			if l := answer("list"); l.IsError || l.Structured["dir"] != root || !strings.Contains(l.Text, "hello.lua") || strings.Contains(l.Text, "workspace.lua") {
				t.Errorf("listing the root: %+v", l)
			}
			refused("listSlash", "outside the client's MCP roots")
			if in, aw := answer("inside"), answer("insideAwait"); in.IsError || aw.Structured["status"] != "completed" {
				t.Errorf("a workflow inside the root: %+v, awaited %+v", in, aw)
			}
			refused("outside", "outside the client's MCP roots ("+root+")")
			refused("dotenv", "not a .lua file")
			refused("validateEnv", "not a .lua file")
			refused("afterChange", "outside the client's MCP roots ("+other+")")
			if n, _ := got["rootsAsked"].(float64); n < 5 {
				t.Errorf("roots/list asked %v times, want one per call with a path", got["rootsAsked"])
			}
			huge := answer("huge")
			if huge.RPCError == nil || !strings.Contains(huge.RPCError.Message, "more than 33554432 bytes refused") {
				t.Errorf("a 40 MiB argument: %+v", huge)
			}
			if a := answer("afterHuge"); a.IsError || a.RPCError != nil {
				t.Errorf("the session after the 40 MiB argument: %+v", a)
			}
			if a := answer("otherStatus"); a.IsError || a.RPCError != nil {
				t.Errorf("another session's status: %+v", a)
			}
			refused("otherCancel", "was started by another MCP session")
			if a := answer("ownCancel"); a.IsError || a.Structured["cancel_requested"] != true {
				t.Errorf("the owner's cancel: %+v", a)
			}
		})
	}
}
