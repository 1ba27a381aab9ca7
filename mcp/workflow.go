package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/mcp"
)

// Bounds on what a caller may ask for.
const (
	// MaxScript is the largest workflow taken, as a script or a file (the daemon's
	// bound for POST /api/runs).
	MaxScript = 8 << 20
	// MaxArgsBytes bounds a run's args as JSON.
	MaxArgsBytes = 1 << 20
	// defaultEvents and maxEvents bound workflow_events' page; maxEventPageBytes bounds
	// its size (an event may hold up to 1 MiB).
	defaultEvents     = 50
	maxEvents         = 500
	maxEventPageBytes = 4 << 20
	maxTypes          = 64
	// defaultRuns and maxRuns bound workflow_list_runs' page.
	defaultRuns = 20
	maxRuns     = 200
	// maxFiles, maxFileDepth and maxDirEntries bound workflow_list_files' walk.
	maxFiles      = 200
	maxFileDepth  = 3
	maxDirEntries = 20000
	// defaultAwait is workflow_await's timeout when none is given: under the 60 s a
	// client's request times out by default.
	defaultAwait   = 45 * time.Second
	maxConcurrency = 10000
)

// RunView is a run as the workflow tools show it: the one shape of a run every door
// answers with (door.Run), so workflow_status says what `luft status --json` and the
// daemon API say.
type RunView = door.Run

// PhaseView is one phase of a run.
type PhaseView = door.Phase

func runView(r storage.Run, phases []storage.Phase, withReport bool) RunView {
	v := door.NewRun(r).WaitingAt(r, time.Now())
	v.Phases = door.NewPhases(phases)
	if withReport {
		v = v.WithReport(r)
	}
	return v
}

// summary is a run in one line of text.
func summary(v RunView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s (%s): %s", v.RunID, v.Workflow, v.Status)
	if v.Attempt > 1 {
		fmt.Fprintf(&b, ", attempt %d", v.Attempt)
	}
	fmt.Fprintf(&b, "; agents %s", v.Agents)
	if n := len(v.Phases); n > 0 {
		p := v.Phases[n-1]
		fmt.Fprintf(&b, "; phase %d/%d %q %s", n, n, p.Label, p.Status)
	}
	if v.Error != "" {
		fmt.Fprintf(&b, "; error: %s", v.Error)
	}
	return b.String()
}

func runText(v RunView) string {
	s := summary(v)
	if r, ok := v.Report.(json.RawMessage); ok {
		s += "\nreport: " + string(r)
	}
	return s
}

// ExecuteArgs are workflow_execute's arguments.
type ExecuteArgs struct {
	Script      string         `json:"script,omitempty"`
	Path        string         `json:"path,omitempty"`
	Args        map[string]any `json:"args,omitempty"`
	Backend     string         `json:"backend,omitempty"`
	Model       string         `json:"model,omitempty"`
	Concurrency int            `json:"concurrency,omitempty"`
	Class       string         `json:"class,omitempty"`
}

// ExecuteResult is workflow_execute's answer.
type ExecuteResult struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Workflow string `json:"workflow"`
}

// EventsResult is one page of a run's events.
type EventsResult struct {
	RunID  string      `json:"run_id"`
	Events []EventView `json:"events"`
	// NextSeq is the since_seq of the next page.
	NextSeq int64 `json:"next_seq"`
	// More is true when more events matched than this page holds.
	More bool `json:"more"`
	// RunStatus is the run's status when the page was read.
	RunStatus string `json:"run_status"`
}

// EventView is one event of a run.
type EventView struct {
	Seq  int64          `json:"seq"`
	TS   time.Time      `json:"ts"`
	Type string         `json:"type"`
	Data map[string]any `json:"data,omitempty"`
}

// RunsPage is one page of workflow_list_runs.
type RunsPage struct {
	Runs []RunView `json:"runs"`
	// NextCursor, passed as cursor, gives the next (older) page; empty on the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// FilesResult lists workflow files.
type FilesResult struct {
	Dir       string     `json:"dir"`
	Files     []FileView `json:"files"`
	Truncated bool       `json:"truncated"`
}

// FileView is one workflow file.
type FileView struct {
	Path     string    `json:"path"` // relative to Dir
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// ValidateResult is workflow_validate's answer.
type ValidateResult struct {
	OK bool `json:"ok"`
	// Error says what is wrong and where (file:line), when not OK.
	Error string `json:"error,omitempty"`
	// AgentCalls is how many agent calls the dry run on the mock backend made.
	AgentCalls int `json:"agent_calls"`
}

// CancelResult is workflow_cancel's answer.
type CancelResult struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	// CancelRequested is true when this call asked a running run to stop (it ends as
	// cancelled shortly; workflow_await shows it).
	CancelRequested bool `json:"cancel_requested"`
}

const runIDSchema = `"run_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "the run's id (or a unique prefix of it), as workflow_execute or workflow_list_runs gave it"}`

func (s *Server) addWorkflowTools() {
	s.AddTool(mcp.NewTool("workflow_execute",
		mcp.WithDescription("Start a luft workflow (a Lua script) and return its run_id at once; the run goes on in the background. "+
			"Give the script's source as script, or a .lua file as path. The script is checked first: a syntax error comes back as an error to fix. "+
			"Then call workflow_await{run_id} to wait for its end and report."),
		rawInput((`{"type": "object", "additionalProperties": false, "properties": {
  "script": {"type": "string", "maxLength": 8388608, "description": "the workflow's Lua source (give script or path)"},
  "path": {"type": "string", "maxLength": 4096, "description": "a .lua workflow file inside the client's MCP roots (or, without roots, its working directory), absolute or relative to its working directory (give script or path)"},
  "args": {"type": "object", "description": "arguments the script reads as args"},
  "backend": {"type": "string", "maxLength": 200, "description": "default backend for agent calls that name none (e.g. mock, openai); default: the configured one"},
  "model": {"type": "string", "maxLength": 200, "description": "default model for agent calls that name none"},
  "concurrency": {"type": "integer", "minimum": 0, "maximum": 10000, "description": "default max_inflight of pipelines"},
  "class": {"type": "string", "enum": ["interactive", "batch"], "description": "scheduling class of the run's turns (default interactive)"}}}`)),
		mcp.WithOutputSchema[ExecuteResult](),
		mcp.WithTitleAnnotation("Start a workflow"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(true),
	), s.execute)

	s.AddTool(mcp.NewTool("workflow_status",
		mcp.WithDescription("Show a run: status, agents done/failed, phases, usage and, once it has one, its report. Prefer workflow_await to wait for a run."),
		rawInput((`{"type": "object", "additionalProperties": false, "required": ["run_id"], "properties": {`+runIDSchema+`}}`)),
		mcp.WithOutputSchema[RunView](),
		mcp.WithTitleAnnotation("Run status"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.status)

	s.AddTool(mcp.NewTool("workflow_events",
		mcp.WithDescription("Read a run's events in order, a page at a time: pass the page's next_seq as since_seq for the next one. types filters by event type (run_started, phase_started, phase_done, agent_started, agent_done, log, report, run_done, ...)."),
		rawInput((`{"type": "object", "additionalProperties": false, "required": ["run_id"], "properties": {`+runIDSchema+`,
  "since_seq": {"type": "integer", "minimum": 0, "description": "only events after this seq (default 0: from the start)"},
  "types": {"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 64}, "description": "only these event types (default all)"},
  "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "events per page (default 50)"}}}`)),
		mcp.WithOutputSchema[EventsResult](),
		mcp.WithTitleAnnotation("Run events"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.events)

	s.AddTool(mcp.NewTool("workflow_await",
		mcp.WithDescription("Wait for a run to end and return its status and report. Returns early when timeout_s passes with the run still running (status running): call it again. "+
			"Sends progress notifications (phase and agent counts) while it waits when the request carries a progressToken."),
		rawInput((`{"type": "object", "additionalProperties": false, "required": ["run_id"], "properties": {`+runIDSchema+`,
  "timeout_s": {"type": "number", "minimum": 0, "maximum": 3600, "description": "longest wait in seconds (default 45; capped by the server, 600 by default); 0 answers at once"}}}`)),
		mcp.WithOutputSchema[RunView](),
		mcp.WithTitleAnnotation("Wait for a run"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.await)

	s.AddTool(mcp.NewTool("workflow_cancel",
		mcp.WithDescription("Cancel a running run: no new agent calls start, calls in flight are stopped, and it ends as cancelled (a cancelled run can be resumed later with luft run --resume)."),
		rawInput((`{"type": "object", "additionalProperties": false, "required": ["run_id"], "properties": {`+runIDSchema+`}}`)),
		mcp.WithOutputSchema[CancelResult](),
		mcp.WithTitleAnnotation("Cancel a run"),
		mcp.WithReadOnlyHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.cancel)

	s.AddTool(mcp.NewTool("workflow_list_runs",
		mcp.WithDescription("List runs, newest first, a page at a time (pass next_cursor as cursor for older ones); status filters by status."),
		rawInput((`{"type": "object", "additionalProperties": false, "properties": {
  "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "runs per page (default 20)"},
  "cursor": {"type": "string", "maxLength": 64, "description": "next_cursor of the previous page"},
  "status": {"type": "string", "enum": ["running", "awaiting_approval", "completed", "failed", "cancelled", "suspended", "interrupted"], "description": "only runs in this status"}}}`)),
		mcp.WithOutputSchema[RunsPage](),
		mcp.WithTitleAnnotation("List runs"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.listRuns)

	s.AddTool(mcp.NewTool("workflow_list_files",
		mcp.WithDescription("List the .lua workflow files in a directory (default: the client's working directory) and its subdirectories, up to 3 levels and 200 files; hidden directories are skipped."),
		rawInput((`{"type": "object", "additionalProperties": false, "properties": {
  "dir": {"type": "string", "maxLength": 4096, "description": "the directory, absolute or relative to the client's working directory"}}}`)),
		mcp.WithOutputSchema[FilesResult](),
		mcp.WithTitleAnnotation("List workflow files"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.listFiles)

	s.AddTool(mcp.NewTool("workflow_validate",
		mcp.WithDescription("Check a workflow without real agents: it must compile, define main(), carry a valid meta table and run to its end on the offline mock backend (30 s at most). "+
			"Answers ok, or the error with file:line to fix."),
		rawInput((`{"type": "object", "additionalProperties": false, "properties": {
  "script": {"type": "string", "maxLength": 8388608, "description": "the workflow's Lua source (give script or path)"},
  "path": {"type": "string", "maxLength": 4096, "description": "a .lua workflow file inside the client's MCP roots or working directory (give script or path)"},
  "args": {"type": "object", "description": "arguments for the dry run"}}}`)),
		mcp.WithOutputSchema[ValidateResult](),
		mcp.WithTitleAnnotation("Validate a workflow"),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), s.validate)
}

// rawInput sets a tool's input schema as written (NewTool's default object schema would
// otherwise be sent beside it).
func rawInput(schema string) mcp.ToolOption {
	return func(t *mcp.Tool) {
		t.InputSchema = mcp.ToolInputSchema{}
		t.RawInputSchema = json.RawMessage(schema)
	}
}

// workflowSource reads the script a call names: its source, or a .lua file resolved in
// the request's workdir and inside its scope (readWorkflowPath). Both are bounded by
// MaxScript.
func (s *Server) workflowSource(ctx context.Context, tool, script, path string) (src []byte, abs string, err error) {
	switch {
	case script != "" && path != "":
		return nil, "", fmt.Errorf("%s: give script or path, not both", tool)
	case script == "" && path == "":
		return nil, "", fmt.Errorf("%s: give the workflow as script (its Lua source) or path (a .lua file)", tool)
	case script != "":
		if len(script) > MaxScript {
			return nil, "", fmt.Errorf("%s: script is %d bytes, more than the %d a workflow may have", tool, len(script), MaxScript)
		}
		return []byte(script), "", nil
	}
	return s.readWorkflowPath(ctx, tool, path)
}

func checkArgs(tool string, args map[string]any) error {
	if args == nil {
		return nil
	}
	if n := event.Size(args); n > MaxArgsBytes {
		return fmt.Errorf("%s: args are %d bytes as JSON, more than %d: pass large inputs as files the script reads", tool, n, MaxArgsBytes)
	}
	if luaval.Deeper(args, luaval.DefaultMaxDepth) {
		return fmt.Errorf("%s: args nest objects and arrays deeper than the limit of %d levels", tool, luaval.DefaultMaxDepth)
	}
	return nil
}

func (s *Server) execute(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a ExecuteArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	src, abs, err := s.workflowSource(ctx, "workflow_execute", a.Script, a.Path)
	if err != nil {
		return ToolError("%v", err), nil
	}
	if err := checkArgs("workflow_execute", a.Args); err != nil {
		return ToolError("%v", err), nil
	}
	if a.Class != "" && a.Class != string(agent.ClassInteractive) && a.Class != string(agent.ClassBatch) {
		return ToolError("workflow_execute: class %q: use interactive or batch", a.Class), nil
	}
	if a.Concurrency < 0 || a.Concurrency > maxConcurrency {
		return ToolError("workflow_execute: concurrency %d: use 1 to %d (0 = the default)", a.Concurrency, maxConcurrency), nil
	}
	// Compile first: a script error is the caller's to fix, and says where.
	// A file's errors name it and the line, never its tokens (Quiet).
	if _, _, err := s.svc.Load(runtime.Spec{Path: abs, Source: src, Quiet: abs != ""}); err != nil {
		return ToolError("workflow_execute: the workflow does not compile: %v\nFix the script (workflow_validate checks it) and call workflow_execute again.", err), nil
	}
	var args any
	if a.Args != nil {
		args = a.Args
	}
	run, err := s.host.Start(ctx, door.StartRequest{Script: string(src), Path: abs, Args: args, Backend: a.Backend, Model: a.Model,
		Class: a.Class, Concurrency: a.Concurrency, Caller: Caller(ctx), Quiet: abs != ""})
	if err != nil {
		return ToolError("workflow_execute: %v", err), nil
	}
	name := abs
	if name == "" {
		name = "workflow.lua"
	}
	out := ExecuteResult{RunID: run.ID, Status: string(runtime.StatusRunning), Workflow: name}
	return Result(out, fmt.Sprintf("started run %s (%s). Call workflow_await{run_id: %q} to wait for its end.", run.ID, name, run.ID)), nil
}

// runRef resolves a run id argument, or says what to do.
func (s *Server) runRef(ctx context.Context, tool, id string) (runtime.RunInfo, *mcp.CallToolResult) {
	if strings.TrimSpace(id) == "" {
		return runtime.RunInfo{}, ToolError("%s: run_id is required (workflow_list_runs lists the runs)", tool)
	}
	if len(id) > 64 {
		return runtime.RunInfo{}, ToolError("%s: run_id is %d characters; a run id has 36 (workflow_list_runs lists the runs)", tool, len(id))
	}
	info, err := s.liveStatus(ctx, id)
	switch {
	case errors.Is(err, storage.ErrRunNotFound):
		return info, ToolError("%s: no run %q here (workflow_list_runs lists the runs)", tool, id)
	case errors.Is(err, storage.ErrAmbiguousRun):
		return info, ToolError("%s: %s", tool, ambiguous(err, "run", "workflow_list_runs lists the runs"))
	case err != nil:
		return info, ToolError("%s: run %s: %v", tool, id, err)
	}
	return info, nil
}

type runArgs struct {
	RunID string `json:"run_id"`
}

func (s *Server) status(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a runArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	info, bad := s.runRef(ctx, "workflow_status", a.RunID)
	if bad != nil {
		return bad, nil
	}
	v := runView(info.Run, info.Phases, true)
	v.Pending = approvalViews(info.Pending)
	return Result(v, runText(v)+approvalText(info.ID, info.Pending)), nil
}

type eventsArgs struct {
	RunID    string   `json:"run_id"`
	SinceSeq int64    `json:"since_seq"`
	Types    []string `json:"types"`
	Limit    int      `json:"limit"`
}

func (s *Server) events(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a eventsArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	switch {
	case a.Limit == 0:
		a.Limit = defaultEvents
	case a.Limit < 0 || a.Limit > maxEvents:
		return ToolError("workflow_events: limit %d: use 1 to %d", a.Limit, maxEvents), nil
	}
	if a.SinceSeq < 0 {
		return ToolError("workflow_events: since_seq %d: use 0 (from the start) or a next_seq it gave", a.SinceSeq), nil
	}
	if len(a.Types) > maxTypes {
		return ToolError("workflow_events: %d types: filter by at most %d", len(a.Types), maxTypes), nil
	}
	for _, t := range a.Types {
		if t == "" || len(t) > 64 {
			return ToolError("workflow_events: type %q: give event type names such as agent_done or log", event.Cut(t, 64, "…")), nil
		}
	}
	info, bad := s.runRef(ctx, "workflow_events", a.RunID)
	if bad != nil {
		return bad, nil
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	evs, errc, err := s.svc.Events(rctx, info.ID, runtime.EventsOptions{Since: a.SinceSeq, Types: a.Types})
	if err != nil {
		return ToolError("workflow_events: run %s: %v", info.ID, err), nil
	}
	out := EventsResult{RunID: info.ID, Events: []EventView{}, NextSeq: a.SinceSeq, RunStatus: info.Status}
	bytes := 0
	for ev := range evs {
		n := event.Size(ev.Data)
		if len(out.Events) == a.Limit || (len(out.Events) > 0 && bytes+n > maxEventPageBytes) {
			out.More = true
			stop()
			break
		}
		bytes += n
		out.Events = append(out.Events, EventView{Seq: ev.Seq, TS: ev.TS, Type: ev.Type, Data: ev.Data})
		out.NextSeq = ev.Seq
	}
	for range evs { // drain so the reader ends
	}
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return ToolError("workflow_events: run %s: %v", info.ID, err), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "run %s (%s): %d events", info.ID, info.Status, len(out.Events))
	if out.More {
		fmt.Fprintf(&b, " (more: since_seq %d)", out.NextSeq)
	}
	for _, ev := range out.Events {
		d, _ := json.Marshal(ev.Data)
		fmt.Fprintf(&b, "\n%d %s %s %s", ev.Seq, ev.TS.UTC().Format(time.RFC3339Nano), ev.Type, event.Cut(string(d), 500, "…"))
	}
	return Result(out, b.String()), nil
}

func (s *Server) cancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a runArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	info, bad := s.runRef(ctx, "workflow_cancel", a.RunID)
	if bad != nil {
		return bad, nil
	}
	if err := mayControl(ctx, "workflow_cancel", info); err != nil {
		return ToolError("%v", err), nil
	}
	if !runtime.Running(info.Status) {
		out := CancelResult{RunID: info.ID, Status: info.Status}
		return Result(out, fmt.Sprintf("run %s is %s already: nothing to cancel", info.ID, info.Status)), nil
	}
	r, err := s.svc.Cancel(ctx, info.ID)
	if err != nil {
		return ToolError("workflow_cancel: %v", err), nil
	}
	out := CancelResult{RunID: r.ID, Status: r.Status, CancelRequested: true}
	return Result(out, fmt.Sprintf("run %s: cancel requested; it ends as cancelled (workflow_await shows it)", r.ID)), nil
}

type listArgs struct {
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
	Status string `json:"status"`
}

var statuses = []string{storage.StatusRunning, string(runtime.StatusAwaitingApproval), string(runtime.StatusIdle), storage.StatusCompleted, storage.StatusFailed, storage.StatusCancelled,
	storage.StatusSuspended, storage.StatusInterrupted}

func (s *Server) listRuns(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a listArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	switch {
	case a.Limit == 0:
		a.Limit = defaultRuns
	case a.Limit < 0 || a.Limit > maxRuns:
		return ToolError("workflow_list_runs: limit %d: use 1 to %d", a.Limit, maxRuns), nil
	}
	if a.Status != "" && !slices.Contains(statuses, a.Status) {
		return ToolError("workflow_list_runs: status %q: use one of %s", a.Status, strings.Join(statuses, ", ")), nil
	}
	if a.Cursor != "" {
		if len(a.Cursor) > 64 {
			return ToolError("workflow_list_runs: cursor is not one this tool gave: start again without cursor"), nil
		}
		if _, err := s.svc.Resolve(ctx, a.Cursor); err != nil {
			return ToolError("workflow_list_runs: cursor %q is not a run of this list: start again without cursor", a.Cursor), nil
		}
	}
	// One more than a page tells whether another follows. (List tells interrupted runs,
	// stored as running, from running ones.)
	runs, err := s.svc.List(ctx, storage.ListOptions{Status: a.Status, Before: a.Cursor, Limit: a.Limit + 1})
	if err != nil {
		return ToolError("workflow_list_runs: %v", err), nil
	}
	page := RunsPage{Runs: []RunView{}}
	for _, r := range runs {
		if len(page.Runs) == a.Limit {
			page.NextCursor = page.Runs[a.Limit-1].RunID
			break
		}
		page.Runs = append(page.Runs, runView(r, nil, false))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs", len(page.Runs))
	if page.NextCursor != "" {
		fmt.Fprintf(&b, " (more: cursor %s)", page.NextCursor)
	}
	for _, r := range page.Runs {
		b.WriteString("\n" + summary(r))
	}
	return Result(page, b.String()), nil
}

type filesArgs struct {
	Dir string `json:"dir"`
}

func (s *Server) listFiles(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a filesArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	dir, root, relDir, err := s.listDir(ctx, a.Dir)
	if err != nil {
		return ToolError("%v", err), nil
	}
	r, fsys, start, err := openDir(root, relDir)
	if err != nil {
		return ToolError("workflow_list_files: %s is not a directory: give one that holds .lua workflows", shown(dir)), nil
	}
	defer r.Close()
	out := FilesResult{Dir: dir, Files: []FileView{}}
	seen := 0
	walkErr := fs.WalkDir(fsys, start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start {
				return err
			}
			return nil // an unreadable subdirectory is skipped
		}
		if seen++; seen > maxDirEntries {
			out.Truncated = true
			return fs.SkipAll
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, start), "/")
		if start == "." {
			rel = p
		}
		if d.IsDir() {
			if p != start && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || strings.Count(rel, "/") >= maxFileDepth-1) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".lua") {
			return nil
		}
		if len(out.Files) == maxFiles {
			out.Truncated = true
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		out.Files = append(out.Files, FileView{Path: rel, Size: info.Size(), Modified: info.ModTime().UTC()})
		return nil
	})
	if walkErr != nil {
		return ToolError("workflow_list_files: %s: %v", shown(dir), walkErr), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d workflow files in %s", len(out.Files), dir)
	if out.Truncated {
		b.WriteString(" (list cut short: name a subdirectory as dir)")
	}
	for _, f := range out.Files {
		fmt.Fprintf(&b, "\n%s (%d bytes)", f.Path, f.Size)
	}
	return Result(out, b.String()), nil
}

type validateArgs struct {
	Script string         `json:"script"`
	Path   string         `json:"path"`
	Args   map[string]any `json:"args"`
}

func (s *Server) validate(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a validateArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	src, abs, err := s.workflowSource(ctx, "workflow_validate", a.Script, a.Path)
	if err != nil {
		return ToolError("%v", err), nil
	}
	if err := checkArgs("workflow_validate", a.Args); err != nil {
		return ToolError("%v", err), nil
	}
	var args any
	if a.Args != nil {
		args = a.Args
	}
	res, err := s.opts.Validate(ctx, door.StartRequest{Script: string(src), Path: abs, Args: args, Quiet: abs != ""})
	if err != nil {
		return ToolError("workflow_validate: %v", err), nil
	}
	if !res.OK {
		return Result(res, "invalid: "+res.Error), nil
	}
	return Result(res, fmt.Sprintf("ok (dry run on the mock backend: %d agent calls)", res.AgentCalls)), nil
}

// ambiguous says which ids an ambiguous prefix matches, so the caller can pick one.
func ambiguous(err error, what, hint string) string {
	var ae *storage.AmbiguousRunError
	if !errors.As(err, &ae) {
		return fmt.Sprintf("the %s id is the start of more than one %s id: give more of it (%s)", what, what, hint)
	}
	ids := strings.Join(ae.Candidates, ", ")
	if ae.More {
		ids += ", ..."
	}
	return fmt.Sprintf("%q is the start of more than one %s id: %s; give more of it (%s)", ae.Prefix, what, ids, hint)
}
