package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/schema"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// A sub-agent is a run of a one-call workflow (subagentScript) hosted like any other run:
// its handle is the run id, so it survives a restart of the MCP server and of the daemon
// (which resumes it), and everything the workflow tools show works on it too.

// SubagentWorkflow is the workflow name of a sub-agent's run.
const SubagentWorkflow = "subagent.lua"

// subagentScript runs the one agent call of a sub-agent with the arguments spawn was
// given and reports what the agent returned.
const subagentScript = `function main()
  local a = args
  local r = agent{name = a.name or "subagent", prompt = a.prompt, system = a.system, tools = a.tools,
    schema = a.schema, timeout_ms = a.timeout_ms}
  report{ok = r.ok, status = r.status, output = r.output, text = r.text, error = r.error,
    usage = r.usage, tokens = r.tokens, cost = r.cost, backend = r.backend, model = r.model}
end
`

// Bounds of the sub-agent tools.
const (
	maxHandles    = 100
	maxPromptSize = 512 << 10
	maxToolNames  = 64
)

// SpawnArgs are spawn's arguments (run adds timeout_s and mode is not taken).
type SpawnArgs struct {
	Prompt   string         `json:"prompt"`
	System   string         `json:"system,omitempty"`
	Backend  string         `json:"backend,omitempty"`
	Model    string         `json:"model,omitempty"`
	Tools    []string       `json:"tools,omitempty"`
	Schema   map[string]any `json:"schema,omitempty"`
	Class    string         `json:"class,omitempty"`
	Name     string         `json:"name,omitempty"`
	AgentTTL float64        `json:"agent_timeout_s,omitempty"`
}

// SpawnResult is spawn's answer.
type SpawnResult struct {
	Handle string `json:"handle"`
	Status string `json:"status"`
}

// SubagentView is a sub-agent as await, run and status show it.
type SubagentView struct {
	Handle string `json:"handle"`
	// Status is running, awaiting_approval (answer with approve, or the client is asked),
	// completed (the agent answered), failed (the agent or its run failed), cancelled,
	// suspended or interrupted (the run resumes, or can be resumed).
	Status string `json:"status" jsonschema:"enum=running,enum=awaiting_approval,enum=completed,enum=failed,enum=cancelled,enum=suspended,enum=interrupted"`
	// Output is the agent's answer: the decoded JSON value when a schema was given,
	// else its text.
	Output any            `json:"output,omitempty" jsonschema_description:"the decoded JSON value when a schema was given, else the text"`
	Error  string         `json:"error,omitempty"`
	Usage  storage.Usage  `json:"usage"`
	Cost   float64        `json:"cost"`
	Model  string         `json:"model,omitempty"`
	Pend   []ApprovalView `json:"pending_approvals,omitempty"`
}

// ApprovalView is a tool call of a run waiting for the user's answer (approve), in the
// shape every door shows it (door.Approval).
type ApprovalView = door.Approval

// AwaitResult is await's and run's answer.
type AwaitResult struct {
	Handles []SubagentView `json:"handles"`
	// Done counts the handles that ended (completed, failed, cancelled).
	Done int `json:"done"`
	// Waiting counts the handles that wait for an approval: answer with approve.
	Waiting int `json:"awaiting_approval"`
}

// ApproveResult is approve's answer.
type ApproveResult struct {
	Handle     string `json:"handle"`
	ApprovalID string `json:"approval_id"`
	Tool       string `json:"tool"`
	Status     string `json:"status" jsonschema:"enum=allowed,enum=declined"`
}

// ToolCatalog is what sub-agents may call: the built-in tools and the upstream MCP
// servers of the config ([tools], [mcp_servers]).
type ToolCatalog struct {
	// Approval is the policy for destructive tools: allow, deny or ask (the call waits
	// for the user: approve, or the client is asked while it awaits).
	Approval      string       `json:"approval"`
	Workspace     string       `json:"workspace,omitempty"`
	AllowCommands []string     `json:"allow_commands,omitempty"`
	Tools         []ToolInfo   `json:"tools"`
	Servers       []ServerInfo `json:"mcp_servers"`
}

// ToolInfo is one tool a sub-agent may be given.
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Destructive bool   `json:"destructive"`
}

// ServerInfo is one upstream MCP server: its tools are named <name>__<tool>.
type ServerInfo struct {
	Name    string `json:"name"`
	Command string `json:"command,omitempty"`
	URL     string `json:"url,omitempty"`
}

// subagents holds the sub-agent tools' state: the approvals being asked of clients now.
type subagents struct {
	s      *Server
	mu     sync.Mutex
	asking map[string]bool // session/run/approval id
}

// addSubagentTools adds the sub-agent tools (spawn, await, run, status, cancel, approve,
// tools: SPEC §8) and the hook that asks an eliciting client for approvals while it
// awaits a run.
func (s *Server) addSubagentTools() {
	sa := &subagents{s: s, asking: map[string]bool{}}
	s.OnAwaitEvent(sa.elicit)
	spawnProps := `"prompt": {"type": "string", "minLength": 1, "maxLength": 524288, "description": "the task for the sub-agent"},
  "system": {"type": "string", "maxLength": 524288, "description": "its system prompt"},
  "backend": {"type": "string", "maxLength": 200, "description": "backend id (default: the configured default)"},
  "model": {"type": "string", "maxLength": 200, "description": "model (default: the backend's)"},
  "tools": {"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 200}, "description": "tools the sub-agent may call (the tools tool lists them)"},
  "schema": {"type": "object", "description": "JSON Schema its output must match; the output is then the decoded JSON value"},
  "class": {"type": "string", "enum": ["interactive", "batch"], "description": "scheduling class (default interactive)"},
  "name": {"type": "string", "maxLength": 200, "description": "a name for the sub-agent in events and views"},
  "agent_timeout_s": {"type": "number", "minimum": 0, "maximum": 86400, "description": "bound on the agent's working time (0 = none)"}`
	handles := `"handles": {"type": "array", "minItems": 1, "maxItems": 100, "items": {"type": "string", "minLength": 1, "maxLength": 64}, "description": "handles from spawn"}`
	timeout := `"timeout_s": {"type": "number", "minimum": 0, "maximum": 3600, "description": "longest wait in seconds (default 45; capped by the server); 0 answers at once"}`

	s.AddTool(mcp.NewTool("spawn",
		mcp.WithDescription("Start a sub-agent (one agent call, scheduled and journaled by luft) and return its handle at once. "+
			"Wait for it with await{handles}; spawn several and await them together to fan out. A handle survives restarts."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["prompt"], "properties": {`+spawnProps+`}}`),
		mcp.WithOutputSchema[SpawnResult](),
		mcp.WithTitleAnnotation("Start a sub-agent"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(true),
	), sa.spawn)

	s.AddTool(mcp.NewTool("await",
		mcp.WithDescription("Wait for sub-agents: mode all (default) returns when every handle ended, any when one did; either returns at timeout_s with the rest still running (call again). "+
			"A sub-agent whose tool call needs approval is shown as awaiting_approval with the call: answer with approve (a client that supports elicitation is asked instead)."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["handles"], "properties": {`+handles+`, `+timeout+`,
  "mode": {"type": "string", "enum": ["any", "all"], "description": "all (default): wait for every handle; any: for the first"}}}`),
		mcp.WithOutputSchema[AwaitResult](),
		mcp.WithTitleAnnotation("Wait for sub-agents"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), sa.await)

	s.AddTool(mcp.NewTool("run",
		mcp.WithDescription("Start a sub-agent and wait for its answer (spawn + await). If timeout_s passes first, the answer has its handle with status running: await it."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["prompt"], "properties": {`+spawnProps+`, `+timeout+`}}`),
		mcp.WithOutputSchema[AwaitResult](),
		mcp.WithTitleAnnotation("Run a sub-agent"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(true),
	), sa.run)

	s.AddTool(mcp.NewTool("status",
		mcp.WithDescription("Show sub-agents now, without waiting: status, output, error, usage, and any tool call awaiting approval."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["handles"], "properties": {`+handles+`}}`),
		mcp.WithOutputSchema[AwaitResult](),
		mcp.WithTitleAnnotation("Sub-agent status"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), sa.status)

	s.AddTool(mcp.NewTool("cancel",
		mcp.WithDescription("Cancel a running sub-agent; it ends as cancelled."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["handle"], "properties": {
  "handle": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the handle from spawn"}}}`),
		mcp.WithOutputSchema[CancelResult](),
		mcp.WithTitleAnnotation("Cancel a sub-agent"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), sa.cancel)

	s.AddTool(mcp.NewTool("approve",
		mcp.WithDescription("Answer a tool call a sub-agent (or any run) waits on: allow runs it, allow=false tells the agent the user declined and it goes on. "+
			"approval_id may be left out when the run waits on one call. Ask the user before allowing."),
		rawInput(`{"type": "object", "additionalProperties": false, "required": ["allow"], "properties": {
  "handle": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the sub-agent's handle (or give run_id)"},
  "run_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "a workflow run's id (or give handle)"},
  "approval_id": {"type": "string", "maxLength": 64, "description": "which pending call (from pending_approvals); default: the only one"},
  "allow": {"type": "boolean", "description": "true runs the tool call, false declines it"}}}`),
		mcp.WithOutputSchema[ApproveResult](),
		mcp.WithTitleAnnotation("Approve a tool call"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	), sa.approve)

	s.AddTool(mcp.NewTool("tools",
		mcp.WithDescription("List what sub-agents may call: the built-in tools (destructive ones need approval under approval=ask) and the upstream MCP servers, whose tools are named <server>__<tool>."),
		rawInput(`{"type": "object", "additionalProperties": false, "properties": {}}`),
		mcp.WithOutputSchema[ToolCatalog](),
		mcp.WithTitleAnnotation("Sub-agent tools"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), sa.tools)
}

// start validates a spawn request and starts its run.
func (sa *subagents) start(ctx context.Context, tool string, a SpawnArgs) (string, *mcp.CallToolResult) {
	switch {
	case strings.TrimSpace(a.Prompt) == "":
		return "", ToolError("%s: prompt is required: the task for the sub-agent", tool)
	case len(a.Prompt) > maxPromptSize || len(a.System) > maxPromptSize:
		return "", ToolError("%s: prompt and system may have %d bytes each: pass large inputs as files the sub-agent reads with its tools", tool, maxPromptSize)
	case len(a.Tools) > maxToolNames:
		return "", ToolError("%s: %d tools: give a sub-agent at most %d", tool, len(a.Tools), maxToolNames)
	case a.Class != "" && a.Class != string(agent.ClassInteractive) && a.Class != string(agent.ClassBatch):
		return "", ToolError("%s: class %q: use interactive or batch", tool, a.Class)
	case a.AgentTTL < 0 || a.AgentTTL > 86400:
		return "", ToolError("%s: agent_timeout_s %g: use 0 (none) to 86400 seconds", tool, a.AgentTTL)
	}
	if a.Schema != nil {
		if _, err := schema.Compile(a.Schema); err != nil {
			return "", ToolError("%s: schema is not a valid JSON Schema: %v", tool, err)
		}
	}
	if bad := sa.unknownTools(ctx, a.Tools); bad != "" {
		return "", ToolError("%s: %s", tool, bad)
	}
	args := map[string]any{"prompt": a.Prompt}
	if a.System != "" {
		args["system"] = a.System
	}
	if len(a.Tools) > 0 {
		args["tools"] = a.Tools
	}
	if a.Schema != nil {
		args["schema"] = a.Schema
	}
	if a.Name != "" {
		args["name"] = a.Name
	}
	if a.AgentTTL > 0 {
		args["timeout_ms"] = int64(a.AgentTTL * 1000)
	}
	if err := checkArgs(tool, args); err != nil {
		return "", ToolError("%v", err)
	}
	run, err := sa.s.host.Start(ctx, door.StartRequest{Script: subagentScript, Path: SubagentWorkflow, Args: args,
		Backend: a.Backend, Model: a.Model, Class: a.Class, Caller: Caller(ctx)})
	if err != nil {
		return "", ToolError("%s: %v", tool, err)
	}
	return run.ID, nil
}

// unknownTools says which of names no sub-agent can be given, when the server knows the
// catalog; "" when all are known.
func (sa *subagents) unknownTools(ctx context.Context, names []string) string {
	if len(names) == 0 || sa.s.opts.Catalog == nil {
		return ""
	}
	cat, err := sa.s.opts.Catalog(ctx)
	if err != nil {
		return ""
	}
	var unknown []string
	for _, n := range names {
		known := slices.ContainsFunc(cat.Tools, func(t ToolInfo) bool { return t.Name == n })
		if server, _, up := strings.Cut(n, "__"); up {
			known = known || slices.ContainsFunc(cat.Servers, func(s ServerInfo) bool { return s.Name == server })
		}
		if !known {
			unknown = append(unknown, fmt.Sprintf("%q", event.Cut(n, 64, "…")))
		}
	}
	if len(unknown) == 0 {
		return ""
	}
	names = nil
	for _, t := range cat.Tools {
		names = append(names, t.Name)
	}
	for _, s := range cat.Servers {
		names = append(names, s.Name+"__<tool>")
	}
	return fmt.Sprintf("unknown tools %s (the tools tool lists them: %s)", strings.Join(unknown, ", "), strings.Join(names, ", "))
}

func (sa *subagents) spawn(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a SpawnArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	id, bad := sa.start(ctx, "spawn", a)
	if bad != nil {
		return bad, nil
	}
	return Result(SpawnResult{Handle: id, Status: string(runtime.StatusRunning)},
		fmt.Sprintf("spawned sub-agent %s. Call await{handles: [%q]} for its answer.", id, id)), nil
}

type runSubArgs struct {
	SpawnArgs
	TimeoutS *float64 `json:"timeout_s"`
}

func (sa *subagents) run(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a runSubArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	wait, bad := sa.wait("run", a.TimeoutS)
	if bad != nil {
		return bad, nil
	}
	id, bad := sa.start(ctx, "run", a.SpawnArgs)
	if bad != nil {
		return bad, nil
	}
	return sa.awaitHandles(ctx, req, []string{id}, wait, false)
}

// wait is a tool's timeout_s as a duration, within the server's cap.
func (sa *subagents) wait(tool string, timeoutS *float64) (time.Duration, *mcp.CallToolResult) {
	wait := defaultAwait
	if timeoutS != nil {
		if *timeoutS < 0 || *timeoutS > 3600 {
			return 0, ToolError("%s: timeout_s %g: use 0 to 3600 seconds", tool, *timeoutS)
		}
		wait = time.Duration(*timeoutS * float64(time.Second))
	}
	return min(wait, sa.s.opts.MaxAwait), nil
}

type handlesArgs struct {
	Handles  []string `json:"handles"`
	TimeoutS *float64 `json:"timeout_s"`
	Mode     string   `json:"mode"`
}

// resolve checks handles and returns their run ids, in order, each once.
func (sa *subagents) resolve(ctx context.Context, tool string, handles []string) ([]string, *mcp.CallToolResult) {
	switch {
	case len(handles) == 0:
		return nil, ToolError("%s: handles is required: the handles spawn gave", tool)
	case len(handles) > maxHandles:
		return nil, ToolError("%s: %d handles: give at most %d at a time", tool, len(handles), maxHandles)
	}
	var ids []string
	for _, h := range handles {
		id, bad := sa.handle(ctx, tool, h)
		if bad != nil {
			return nil, bad
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// handle resolves one handle (a run id or a unique prefix of one).
func (sa *subagents) handle(ctx context.Context, tool, h string) (string, *mcp.CallToolResult) {
	if strings.TrimSpace(h) == "" || len(h) > 64 {
		return "", ToolError("%s: handle %q is not one spawn gave (a handle has 36 characters)", tool, event.Cut(h, 64, "…"))
	}
	r, err := sa.s.svc.Resolve(ctx, h)
	switch {
	case errors.Is(err, storage.ErrRunNotFound):
		return "", ToolError("%s: no sub-agent has the handle %q (spawn gives handles)", tool, h)
	case errors.Is(err, storage.ErrAmbiguousRun):
		return "", ToolError("%s: %s", tool, ambiguous(err, "handle", "give all of it"))
	case err != nil:
		return "", ToolError("%s: handle %s: %v", tool, h, err)
	}
	return r.ID, nil
}

func (sa *subagents) await(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a handlesArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	if a.Mode != "" && a.Mode != "any" && a.Mode != "all" {
		return ToolError("await: mode %q: use all (every handle) or any (the first)", a.Mode), nil
	}
	wait, bad := sa.wait("await", a.TimeoutS)
	if bad != nil {
		return bad, nil
	}
	ids, bad := sa.resolve(ctx, "await", a.Handles)
	if bad != nil {
		return bad, nil
	}
	return sa.awaitHandles(ctx, req, ids, wait, a.Mode == "any")
}

// awaitHandles waits until every run of ids (or, with any, one of them) has settled —
// ended, or waits for an approval the client cannot be asked for — or wait has passed,
// and returns them all as they are then. Each run is awaited with AwaitRun, so an
// eliciting client is asked for its approvals meanwhile; progress counts settled handles.
func (sa *subagents) awaitHandles(ctx context.Context, req mcp.CallToolRequest, ids []string, wait time.Duration, first bool) (*mcp.CallToolResult, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	settled := make(chan struct{}, len(ids))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := sa.s.AwaitRun(wctx, id, wait, nil)
			if err == nil && !runtime.Running(info.Status) || info.Status == string(runtime.StatusAwaitingApproval) {
				settled <- struct{}{}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	n := 0
	for waiting := true; waiting; {
		select {
		case <-settled:
			n++
			sa.s.Progress(ctx, req, float64(n), float64(len(ids)), fmt.Sprintf("%d of %d sub-agents settled", n, len(ids)))
			if first {
				stop()
				waiting = false
			}
		case <-done:
			waiting = false
		}
	}
	stop()
	<-done
	return sa.views(context.WithoutCancel(ctx), ids)
}

// views shows the runs of ids as sub-agents.
func (sa *subagents) views(ctx context.Context, ids []string) (*mcp.CallToolResult, error) {
	out := AwaitResult{Handles: []SubagentView{}}
	var b strings.Builder
	for _, id := range ids {
		info, err := sa.s.svc.Status(ctx, id)
		if err != nil {
			return ToolError("sub-agent %s: %v", id, err), nil
		}
		v := subagentView(info)
		switch v.Status {
		case "completed", "failed", string(runtime.StatusCancelled):
			out.Done++
		case string(runtime.StatusAwaitingApproval):
			out.Waiting++
		}
		out.Handles = append(out.Handles, v)
		fmt.Fprintf(&b, "%s: %s", v.Handle, v.Status)
		if v.Error != "" {
			fmt.Fprintf(&b, ": %s", v.Error)
		}
		if v.Output != nil {
			o, _ := json.Marshal(v.Output)
			if s, ok := v.Output.(string); ok {
				o = []byte(s)
			}
			fmt.Fprintf(&b, "\n%s", event.Cut(string(o), 20000, "…"))
		}
		for _, p := range v.Pend {
			fmt.Fprintf(&b, "\nwaits for approval %s: %s %s — ask the user, then call approve{handle: %q, approval_id: %q, allow: true|false}",
				p.ApprovalID, p.Tool, event.Cut(p.Arguments, 500, "…"), v.Handle, p.ApprovalID)
		}
		b.WriteString("\n")
	}
	switch {
	case out.Done == len(ids):
	case out.Waiting > 0:
	default:
		b.WriteString("some are still running: call await again with their handles\n")
	}
	return Result(out, strings.TrimRight(b.String(), "\n")), nil
}

// subagentReport is what subagentScript reports.
type subagentReport struct {
	OK     bool           `json:"ok"`
	Status string         `json:"status"`
	Output any            `json:"output"`
	Error  string         `json:"error"`
	Model  string         `json:"model"`
	Usage  *storage.Usage `json:"usage"`
}

// approvalViews shows a run's pending approvals.
func approvalViews(pending []runtime.Approval) []ApprovalView { return door.NewApprovals(pending) }

// approvalText tells the caller how to answer a run's pending approvals.
func approvalText(runID string, pending []runtime.Approval) string {
	var b strings.Builder
	for _, p := range pending {
		fmt.Fprintf(&b, "\nwaits for approval %s: %s %s — ask the user, then call approve{run_id: %q, approval_id: %q, allow: true|false}",
			p.ID, p.Tool, event.Cut(p.Arguments, 500, "…"), runID, p.ID)
	}
	return b.String()
}

// subagentView is a run as a sub-agent: a completed run whose agent failed is failed.
func subagentView(info runtime.RunInfo) SubagentView {
	v := SubagentView{Handle: info.ID, Status: info.Status, Error: info.Error, Usage: info.Usage, Cost: info.Cost}
	if info.HasReport {
		var r subagentReport
		if err := json.Unmarshal(info.Report, &r); err == nil && r.Status != "" {
			v.Output, v.Model = r.Output, r.Model
			if !r.OK {
				v.Status, v.Error = "failed", r.Error
				if v.Error == "" {
					v.Error = "the agent ended " + r.Status
				}
			}
		} else {
			v.Output = json.RawMessage(info.Report) // a run that is not a sub-agent's
		}
	}
	v.Pend = approvalViews(info.Pending)
	return v
}

func (sa *subagents) status(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Handles []string `json:"handles"`
	}
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	ids, bad := sa.resolve(ctx, "status", a.Handles)
	if bad != nil {
		return bad, nil
	}
	return sa.views(ctx, ids)
}

func (sa *subagents) cancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Handle string `json:"handle"`
	}
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	id, bad := sa.handle(ctx, "cancel", a.Handle)
	if bad != nil {
		return bad, nil
	}
	info, err := sa.s.svc.Status(ctx, id)
	if err != nil {
		return ToolError("cancel: %v", err), nil
	}
	if err := mayControl(ctx, "cancel", info); err != nil {
		return ToolError("%v", err), nil
	}
	if !runtime.Running(info.Status) {
		return Result(CancelResult{RunID: id, Status: info.Status}, fmt.Sprintf("sub-agent %s is %s already: nothing to cancel", id, info.Status)), nil
	}
	if _, err := sa.s.svc.Cancel(ctx, id); err != nil {
		return ToolError("cancel: %v", err), nil
	}
	return Result(CancelResult{RunID: id, Status: info.Status, CancelRequested: true},
		fmt.Sprintf("sub-agent %s: cancel requested; it ends as cancelled (await shows it)", id)), nil
}

func (sa *subagents) approve(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Handle     string `json:"handle"`
		RunID      string `json:"run_id"`
		ApprovalID string `json:"approval_id"`
		Allow      *bool  `json:"allow"`
	}
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	ref := a.Handle
	switch {
	case a.Allow == nil:
		return ToolError("approve: allow is required: true runs the tool call, false declines it"), nil
	case a.Handle != "" && a.RunID != "" && a.Handle != a.RunID:
		return ToolError("approve: give handle or run_id, not both"), nil
	case ref == "":
		ref = a.RunID
	}
	if ref == "" {
		return ToolError("approve: give the handle (or run_id) of the run that waits"), nil
	}
	id, bad := sa.handle(ctx, "approve", ref)
	if bad != nil {
		return bad, nil
	}
	info, err := sa.s.svc.Status(ctx, id)
	if err != nil {
		return ToolError("approve: %v", err), nil
	}
	if err := mayControl(ctx, "approve", info); err != nil {
		return ToolError("%v", err), nil
	}
	ap, err := sa.s.svc.Approve(ctx, id, a.ApprovalID, *a.Allow)
	if err != nil {
		return ToolError("approve: %v", err), nil
	}
	what := "allowed: the tool call runs"
	if !ap.Allowed() {
		what = "declined: the agent is told and goes on"
	}
	return Result(ApproveResult{Handle: id, ApprovalID: ap.ID, Tool: ap.Tool, Status: ap.Status},
		fmt.Sprintf("%s %s of %s %s", ap.Tool, ap.ID, id, what)), nil
}

func (sa *subagents) tools(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct{}
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	if sa.s.opts.Catalog == nil {
		return ToolError("tools: this server was started without a tool catalog; sub-agents get the tools of the luft.toml its daemon read"), nil
	}
	cat, err := sa.s.opts.Catalog(ctx)
	if err != nil {
		return ToolError("tools: %v", err), nil
	}
	if cat.Tools == nil {
		cat.Tools = []ToolInfo{}
	}
	if cat.Servers == nil {
		cat.Servers = []ServerInfo{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "approval for destructive tools: %s\n", cat.Approval)
	for _, t := range cat.Tools {
		mark := ""
		if t.Destructive {
			mark = " (destructive)"
		}
		fmt.Fprintf(&b, "%s%s: %s\n", t.Name, mark, t.Description)
	}
	for _, s := range cat.Servers {
		fmt.Fprintf(&b, "%s__<tool>: the tools of the MCP server %s\n", s.Name, s.Name)
	}
	return Result(cat, strings.TrimRight(b.String(), "\n")), nil
}

// elicit is the await hook that asks an eliciting client whether a tool call its
// awaited run parked may run (a one-field form: allow), and answers it. A declined or
// cancelled form is a no. One question per approval and session at a time; an approval
// answered meanwhile (approve, another client) is left as it was answered.
func (sa *subagents) elicit(ctx context.Context, runID string, ev event.Event) {
	if ev.Type != event.ApprovalRequested || !CanElicit(ctx) {
		return
	}
	id, _ := ev.Data["approval_id"].(string)
	info, err := sa.s.svc.Status(ctx, runID)
	if err != nil || mayControl(ctx, "approve", info) != nil {
		return // another session's run is not this client's to answer
	}
	i := slices.IndexFunc(info.Pending, func(a runtime.Approval) bool { return a.ID == id })
	if i < 0 {
		return // answered already
	}
	p := info.Pending[i]
	key := Caller(ctx) + "/" + runID + "/" + id
	sa.mu.Lock()
	if sa.asking[key] {
		sa.mu.Unlock()
		return
	}
	sa.asking[key] = true
	sa.mu.Unlock()
	defer func() {
		sa.mu.Lock()
		delete(sa.asking, key)
		sa.mu.Unlock()
	}()
	who := "run " + runID
	if info.Workflow == SubagentWorkflow {
		who = "sub-agent " + runID
	}
	msg := fmt.Sprintf("luft: %s wants to call the destructive tool %s with %s. Allow it?", who, p.Tool, event.Cut(p.Arguments, 2000, "…"))
	res, err := sa.s.Elicit(ctx, msg, map[string]any{
		"type": "object",
		"properties": map[string]any{
			"allow": map[string]any{"type": "boolean", "title": "Allow " + p.Tool, "description": "run this tool call (no: the agent is told you declined)"},
		},
		"required": []string{"allow"},
	})
	if err != nil {
		if !errors.Is(err, server.ErrElicitationNotSupported) && ctx.Err() == nil {
			sa.s.log.Printf("elicit approval %s of %s: %v", id, runID, err)
		}
		return
	}
	allow := false
	if res.Action == mcp.ElicitationResponseActionAccept {
		if m, ok := res.Content.(map[string]any); ok {
			allow, _ = m["allow"].(bool)
		}
	}
	if _, err := sa.s.svc.Approve(context.WithoutCancel(ctx), runID, id, allow); err != nil && !errors.Is(err, storage.ErrApprovalDecided) {
		sa.s.log.Printf("approve %s of %s: %v", id, runID, err)
	}
}
