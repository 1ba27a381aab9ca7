package mcp

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

type setTools struct{ *tools.Set }

func (s setTools) Resolve(_ context.Context, names []string) ([]tools.Tool, error) {
	return s.Set.Resolve(names)
}

// subEnv is a Server whose Service asks approvals, with the mock, held and "fake"
// backends: fake is an openai backend on the fake engine whose agents asked to "keep a
// note" call write_file, destructive under approval "ask", in ws.
type subEnv struct {
	*env
	engine *testkit.Engine
	ws     string
	reg    *adapters.Registry
}

var subRules = []testkit.ToolRule{
	{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "noted"},
	{Match: "", Reply: "plain answer"},
}

func newSubEnv(t *testing.T, elicit client.ElicitationHandler) *subEnv {
	t.Helper()
	eng := testkit.NewEngine(testkit.Config{KeepRequests: true, ToolRules: subRules})
	srv := httptest.NewServer(testkit.NewServer(eng).Handler())
	t.Cleanup(srv.Close)
	ws := t.TempDir()
	set, err := tools.New(tools.Config{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	fake, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "fake", BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m",
		Tools: setTools{set}, NoStream: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHeld()
	reg := adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}), h, fake,
		renamed{adapters.NewMock(adapters.MockConfig{Fail: "error"}), "broken"})
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: reg, AskApprovals: true, CancelPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range svc.Live() {
			r.Cancel()
			<-r.Done()
		}
	})
	catalog := func(context.Context) (ToolCatalog, error) { return CatalogOf(set, "ask", nil), nil }
	s, err := New(Options{Service: svc, Host: ServiceHost{Service: svc, Backends: reg}, Version: "test", Dir: dir, Catalog: catalog,
		mcpOptions: []server.ServerOption{server.WithOutputSchemaValidation()}})
	if err != nil {
		t.Fatal(err)
	}
	var opts []client.ClientOption
	if elicit != nil {
		opts = append(opts, client.WithElicitationHandler(elicit))
	}
	c, err := client.NewInProcessClientWithOptions(s.MCPServer(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	init := initRequest()
	if elicit != nil {
		init.Params.Capabilities.Elicitation = &mcp.ElicitationCapability{}
	}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &subEnv{env: &env{srv: s, svc: svc, st: st, held: h, c: c, dir: dir}, engine: eng, ws: ws, reg: reg}
}

// toolResults are the tool results the fake engine was sent.
func (e *subEnv) toolResults() []string {
	var out []string
	for _, r := range e.engine.Log() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				out = append(out, string(m.Content))
			}
		}
	}
	return out
}

// Sub-agents spawned on the mock backend are awaited together (all and any), run does
// spawn and await in one call, status shows them without waiting, and a schema's output
// comes back decoded.
func TestSpawnAwaitRunStatus(t *testing.T) {
	e := newSubEnv(t, nil)
	var handles []any
	for i := range 3 {
		var sp SpawnResult
		ok(t, e.c, "spawn", map[string]any{"prompt": "summarise part " + string(rune('a'+i)), "class": "batch"}, &sp)
		if sp.Handle == "" || sp.Status != "running" {
			t.Fatalf("spawn: %+v", sp)
		}
		handles = append(handles, sp.Handle)
	}
	var all AwaitResult
	ok(t, e.c, "await", map[string]any{"handles": handles, "timeout_s": 60}, &all)
	if all.Done != 3 || len(all.Handles) != 3 {
		t.Fatalf("await all: %+v", all)
	}
	for i, v := range all.Handles {
		if v.Handle != handles[i] || v.Status != "completed" || v.Output == nil || v.Usage.Input == 0 {
			t.Errorf("handle %d: %+v", i, v)
		}
	}
	var first AwaitResult
	ok(t, e.c, "await", map[string]any{"handles": handles[:1], "mode": "any", "timeout_s": 1}, &first)
	if first.Done != 1 {
		t.Fatalf("await any: %+v", first)
	}
	var ran AwaitResult
	out := ok(t, e.c, "run", map[string]any{"prompt": "rate it", "timeout_s": 60,
		"schema": map[string]any{"type": "object", "properties": map[string]any{"score": map[string]any{"type": "integer"}}, "required": []any{"score"}}}, &ran)
	if len(ran.Handles) != 1 || ran.Handles[0].Status != "completed" || !strings.Contains(out, "score") {
		t.Fatalf("run: %+v %s", ran, out)
	}
	if m, isMap := ran.Handles[0].Output.(map[string]any); !isMap || m["score"] == nil {
		t.Fatalf("run output %#v: want the decoded object", ran.Handles[0].Output)
	}
	var st AwaitResult
	ok(t, e.c, "status", map[string]any{"handles": append(handles, handles[0])}, &st)
	if len(st.Handles) != 3 || st.Done != 3 {
		t.Fatalf("status: %+v", st)
	}
	// The runs are workflow runs too.
	var rv RunView
	ok(t, e.c, "workflow_status", map[string]any{"run_id": handles[0]}, &rv)
	if rv.Workflow != SubagentWorkflow || rv.Status != "completed" {
		t.Fatalf("workflow_status: %+v", rv)
	}
}

// An agent that fails is a failed sub-agent with its error; await returns at its
// timeout with running ones, and any returns with the first that ends.
func TestAwaitFailedAndTimeout(t *testing.T) {
	e := newSubEnv(t, nil)
	var held, quick SpawnResult
	ok(t, e.c, "spawn", map[string]any{"prompt": "wait", "backend": "held"}, &held)
	ok(t, e.c, "spawn", map[string]any{"prompt": "quick"}, &quick)
	<-e.held.started
	var first AwaitResult
	ok(t, e.c, "await", map[string]any{"handles": []any{held.Handle, quick.Handle}, "mode": "any", "timeout_s": 60}, &first)
	if first.Handles[0].Status != "running" || first.Handles[1].Status != "completed" || first.Done != 1 {
		t.Fatalf("await any: %+v", first)
	}
	var timedOut AwaitResult
	txt := ok(t, e.c, "await", map[string]any{"handles": []any{held.Handle}, "timeout_s": 0.05}, &timedOut)
	if timedOut.Handles[0].Status != "running" || !strings.Contains(txt, "call await again") {
		t.Fatalf("await with timeout: %+v %s", timedOut, txt)
	}
	var c CancelResult
	ok(t, e.c, "cancel", map[string]any{"handle": held.Handle}, &c)
	if !c.CancelRequested {
		t.Fatalf("cancel: %+v", c)
	}
	var after AwaitResult
	ok(t, e.c, "await", map[string]any{"handles": []any{held.Handle}, "timeout_s": 60}, &after)
	if after.Handles[0].Status != "cancelled" {
		t.Fatalf("after cancel: %+v", after)
	}
	txt = ok(t, e.c, "cancel", map[string]any{"handle": held.Handle}, &c)
	if c.CancelRequested || !strings.Contains(txt, "already") {
		t.Fatalf("cancel again: %+v %s", c, txt)
	}
	// A failing agent is a failed sub-agent with its error.
	var failed AwaitResult
	ok(t, e.c, "run", map[string]any{"prompt": "x", "backend": "broken", "timeout_s": 60}, &failed)
	if v := failed.Handles[0]; v.Status != "failed" || !strings.Contains(v.Error, "mock") || failed.Done != 1 {
		t.Fatalf("run: %+v", v)
	}
}

// renamed is a backend under another id.
type renamed struct {
	adapters.Backend
	id string
}

func (r renamed) ID() string { return r.id }

// Every argument error is a tool error saying what to do.
func TestSubagentArgumentErrors(t *testing.T) {
	e := newSubEnv(t, nil)
	many := make([]any, 101)
	for i := range many {
		many[i] = "x"
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"spawn", map[string]any{}, "prompt is required"},
		{"spawn", map[string]any{"prompt": "  "}, "prompt is required"},
		{"spawn", map[string]any{"prompt": strings.Repeat("p", maxPromptSize+1)}, "pass large inputs as files"},
		{"spawn", map[string]any{"prompt": "x", "class": "urgent"}, "use interactive or batch"},
		{"spawn", map[string]any{"prompt": "x", "backend": "nope"}, "nope"},
		{"spawn", map[string]any{"prompt": "x", "tools": []any{"rm_rf"}}, `unknown tools "rm_rf"`},
		{"spawn", map[string]any{"prompt": "x", "schema": map[string]any{"type": 7}}, "not a valid JSON Schema"},
		{"spawn", map[string]any{"prompt": "x", "schema": nested(5000)}, "deeper than the limit of 64 levels"},
		{"spawn", map[string]any{"prompt": "x", "agent_timeout_s": -1}, "agent_timeout_s"},
		{"spawn", map[string]any{"prompt": "x", "color": "red"}, "unknown argument"},
		{"spawn", map[string]any{"prompt": 7}, "must be a string"},
		{"run", map[string]any{"prompt": "x", "timeout_s": 99999}, "timeout_s"},
		{"await", map[string]any{}, "handles is required"},
		{"await", map[string]any{"handles": []any{"nope"}}, `no sub-agent has the handle "nope"`},
		{"await", map[string]any{"handles": []any{""}}, "is not one spawn gave"},
		{"await", map[string]any{"handles": many}, "at most 100"},
		{"await", map[string]any{"handles": []any{"x"}, "mode": "some"}, "use all"},
		{"await", map[string]any{"handles": []any{"x"}, "timeout_s": -1}, "timeout_s"},
		{"status", map[string]any{"handles": []any{strings.Repeat("z", 65)}}, "is not one spawn gave"},
		{"cancel", map[string]any{"handle": "nope"}, "no sub-agent"},
		{"approve", map[string]any{"handle": "nope"}, "allow is required"},
		{"approve", map[string]any{"allow": true}, "give the handle"},
		{"approve", map[string]any{"handle": "a", "run_id": "b", "allow": true}, "not both"},
		{"approve", map[string]any{"handle": "nope", "allow": true}, "no sub-agent"},
		{"tools", map[string]any{"x": 1}, "unknown argument"},
	} {
		fails(t, e.c, tc.tool, tc.args, tc.want)
	}
	// approve on a run that waits for nothing names that.
	var sp AwaitResult
	ok(t, e.c, "run", map[string]any{"prompt": "x", "timeout_s": 60}, &sp)
	fails(t, e.c, "approve", map[string]any{"handle": sp.Handles[0].Handle, "allow": true}, "waits for no tool call")
}

// The tools tool lists the built-ins with their destructive marks and the policy.
func TestToolsCatalog(t *testing.T) {
	e := newSubEnv(t, nil)
	var cat ToolCatalog
	txt := ok(t, e.c, "tools", nil, &cat)
	if cat.Approval != "ask" || len(cat.Tools) < 5 || !strings.Contains(txt, "write_file (destructive)") {
		t.Fatalf("tools: %+v\n%s", cat, txt)
	}
	for _, tl := range cat.Tools {
		if tl.Destructive != (tl.Name == "write_file" || tl.Name == "edit_file") {
			t.Errorf("%s: destructive %v", tl.Name, tl.Destructive)
		}
	}
}

// A client without elicitation gets the pending call from await (at once, not at the
// timeout) and answers it with approve; workflow_status and workflow_await show it too.
func TestApproveWithTheTool(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(map[bool]string{true: "allow", false: "decline"}[allow], func(t *testing.T) {
			e := newSubEnv(t, nil)
			var sp SpawnResult
			ok(t, e.c, "spawn", map[string]any{"prompt": "keep a note", "backend": "fake", "tools": []any{"write_file"}}, &sp)
			var aw AwaitResult
			start := time.Now()
			txt := ok(t, e.c, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 600}, &aw)
			if time.Since(start) > 5*time.Minute {
				t.Fatal("await waited for its timeout")
			}
			v := aw.Handles[0]
			if v.Status != "awaiting_approval" || aw.Waiting != 1 || len(v.Pend) != 1 || v.Pend[0].Tool != "write_file" ||
				!strings.Contains(v.Pend[0].Arguments, "note.txt") || !strings.Contains(txt, "call approve") {
				t.Fatalf("await: %+v\n%s", aw, txt)
			}
			var rv RunView
			wtxt := ok(t, e.c, "workflow_await", map[string]any{"run_id": sp.Handle, "timeout_s": 600}, &rv)
			if rv.Status != "awaiting_approval" || len(rv.Pending) != 1 || !strings.Contains(wtxt, "approve{run_id") {
				t.Fatalf("workflow_await: %+v\n%s", rv, wtxt)
			}
			var runs RunsPage
			ok(t, e.c, "workflow_list_runs", map[string]any{"status": "awaiting_approval"}, &runs)
			if len(runs.Runs) != 1 || runs.Runs[0].RunID != sp.Handle {
				t.Fatalf("list awaiting_approval: %+v", runs)
			}
			fails(t, e.c, "approve", map[string]any{"handle": sp.Handle, "approval_id": "ap-nope", "allow": true}, v.Pend[0].ApprovalID)
			var ap ApproveResult
			ok(t, e.c, "approve", map[string]any{"handle": sp.Handle, "approval_id": v.Pend[0].ApprovalID, "allow": allow}, &ap)
			if ap.Tool != "write_file" || ap.Status != map[bool]string{true: "allowed", false: "declined"}[allow] {
				t.Fatalf("approve: %+v", ap)
			}
			fails(t, e.c, "approve", map[string]any{"run_id": sp.Handle, "approval_id": v.Pend[0].ApprovalID, "allow": true}, "already answered")
			ok(t, e.c, "await", map[string]any{"handles": []any{sp.Handle}, "timeout_s": 60}, &aw)
			if aw.Handles[0].Status != "completed" || aw.Handles[0].Output != "noted" {
				t.Fatalf("after approve: %+v", aw)
			}
			_, err := os.Stat(filepath.Join(e.ws, "note.txt"))
			if got := e.toolResults(); allow != (err == nil) || len(got) != 1 || (got[0] == tools.DeclinedText) == allow {
				t.Fatalf("file %v, tool results %q", err, got)
			}
		})
	}
}

// A client that supports elicitation is asked while its await covers the run, with a
// one-field form; accept with allow runs the tool, decline (or accept with allow false)
// declines it, and each approval is asked once.
func TestApprovalElicited(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply mcp.ElicitationResult
		allow bool
	}{
		{"accept", mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"allow": true}}}, true},
		{"accept no", mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"allow": false}}}, false},
		{"decline", mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, false},
		{"cancel", mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionCancel}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &elicitor{reply: tc.reply}
			e := newSubEnv(t, h)
			var ran AwaitResult
			ok(t, e.c, "run", map[string]any{"prompt": "keep a note", "backend": "fake", "tools": []any{"write_file"}, "timeout_s": 60}, &ran)
			if ran.Handles[0].Status != "completed" || ran.Handles[0].Output != "noted" {
				t.Fatalf("run: %+v", ran)
			}
			asked := h.asked()
			if len(asked) != 1 || !strings.Contains(asked[0].Params.Message, "write_file") || !strings.Contains(asked[0].Params.Message, "note.txt") {
				t.Fatalf("elicitations: %+v", asked)
			}
			props, _ := asked[0].Params.RequestedSchema.(map[string]any)["properties"].(map[string]any)
			if len(props) != 1 || props["allow"] == nil {
				t.Fatalf("form: %+v", asked[0].Params.RequestedSchema)
			}
			_, err := os.Stat(filepath.Join(e.ws, "note.txt"))
			if tc.allow != (err == nil) {
				t.Fatalf("allow %v, file: %v", tc.allow, err)
			}
			aps, _ := e.svc.Approvals(t.Context(), ran.Handles[0].Handle)
			if len(aps) != 1 || aps[0].Allowed() != tc.allow {
				t.Fatalf("journaled: %+v", aps)
			}
		})
	}
}

// elicitor is a client's elicitation handler that answers reply and records requests.
type elicitor struct {
	mu    sync.Mutex
	reply mcp.ElicitationResult
	reqs  []mcp.ElicitationRequest
}

func (h *elicitor) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reqs = append(h.reqs, req)
	r := h.reply
	return &r, nil
}

func (h *elicitor) asked() []mcp.ElicitationRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]mcp.ElicitationRequest(nil), h.reqs...)
}

// The sub-agent tools are listed with strict input schemas, output schemas and
// annotations: await, status and tools read only; cancel and approve destructive.
func TestSubagentToolsListed(t *testing.T) {
	e := newSubEnv(t, nil)
	res, err := e.c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]mcp.Tool{}
	for _, tl := range res.Tools {
		listed[tl.Name] = tl
	}
	for name, want := range map[string][2]bool{ // read only, destructive
		"spawn": {false, false}, "await": {true, false}, "run": {false, false}, "status": {true, false},
		"cancel": {false, true}, "approve": {false, true}, "tools": {true, false},
	} {
		tl, found := listed[name]
		if !found {
			t.Errorf("%s is not listed", name)
			continue
		}
		if in := tl.InputSchema; tl.Description == "" || in.Type != "object" || in.AdditionalProperties != false ||
			len(tl.RawOutputSchema) == 0 && tl.OutputSchema.Type != "object" {
			t.Errorf("%s: description, strict input schema or output schema missing", name)
		}
		a := tl.Annotations
		if ro := a.ReadOnlyHint != nil && *a.ReadOnlyHint; ro != want[0] {
			t.Errorf("%s: readOnlyHint %v", name, ro)
		}
		if d := a.DestructiveHint != nil && *a.DestructiveHint; d != want[1] {
			t.Errorf("%s: destructiveHint %v", name, d)
		}
	}
}

// workflow_await asks an eliciting client too, for a call of any workflow run.
func TestWorkflowAwaitElicits(t *testing.T) {
	h := &elicitor{reply: mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"allow": true}}}}
	e := newSubEnv(t, h)
	var ex ExecuteResult
	ok(t, e.c, "workflow_execute", map[string]any{"script": `function main()
  local a = agent{backend = "fake", prompt = "keep a note", tools = {"write_file"}}
  local b = agent{backend = "mock", prompt = "then summarise"}
  report({a = a.output, b = b.ok})
end`}, &ex)
	var rv RunView
	ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &rv)
	if rv.Status != "completed" || len(h.asked()) != 1 || !strings.Contains(h.asked()[0].Params.Message, "run "+ex.RunID) {
		t.Fatalf("workflow_await: %+v, asked %+v", rv, h.asked())
	}
	if _, err := os.Stat(filepath.Join(e.ws, "note.txt")); err != nil {
		t.Fatal(err)
	}
}

// await with a progressToken tells the client as each handle settles; it wakes when the
// held sub-agent is let go, not at its timeout.
func TestAwaitProgress(t *testing.T) {
	e := newSubEnv(t, nil)
	progress := make(chan map[string]any, 10)
	e.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			progress <- n.Params.AdditionalFields
		}
	})
	var quick, held SpawnResult
	ok(t, e.c, "spawn", map[string]any{"prompt": "quick"}, &quick)
	ok(t, e.c, "spawn", map[string]any{"prompt": "wait", "backend": "held"}, &held)
	<-e.held.started
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "await"
		req.Params.Arguments = map[string]any{"handles": []any{quick.Handle, held.Handle}, "timeout_s": 3600}
		req.Params.Meta = &mcp.Meta{ProgressToken: "tok-2"}
		res, _ := e.c.CallTool(context.Background(), req)
		done <- res
	}()
	p := <-progress
	if p["progressToken"] != "tok-2" || p["progress"] != float64(1) || p["total"] != float64(2) || p["message"] != "1 of 2 sub-agents settled" {
		t.Fatalf("progress: %v", p)
	}
	close(e.held.release)
	res := <-done
	if res == nil || res.IsError {
		t.Fatalf("await: %v", res)
	}
	if p := <-progress; p["progress"] != float64(2) {
		t.Fatalf("second progress: %v", p)
	}
}
