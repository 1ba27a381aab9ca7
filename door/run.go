package door

import (
	"encoding/json"
	"time"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// Run is the one JSON shape of a run: `luft status --json` and `luft list --json`, the
// daemon's GET /api/runs and /api/runs/{id}, and the MCP tools workflow_status,
// workflow_await and workflow_list_runs all answer with it. Each door fills the parts it
// has (the MCP tools and status the report and phases, the daemon Hosted, the CLI the
// resume command, args and script hash) and leaves the others out.
//
// The run's id is under two keys with the same value: run_id, the key of SPEC's MCP
// tools, of `luft status --json` and of every event, and id, which the daemon API and its
// dashboard have always used. Phases and approvals carry their id twice the same way.
// ID is last, so a reader of the CLI's output still meets run_id first.
type Run struct {
	RunID    string              `json:"run_id"`
	Workflow string              `json:"workflow"`
	Status   string              `json:"status" jsonschema:"enum=running,enum=awaiting_approval,enum=completed,enum=failed,enum=cancelled,enum=suspended,enum=interrupted"`
	Error    string              `json:"error,omitempty"`
	Attempt  int                 `json:"attempt"`
	Agents   storage.AgentCounts `json:"agents"`
	Tokens   int                 `json:"tokens"` // input + output
	Usage    storage.Usage       `json:"usage"`
	Cost     float64             `json:"cost"`
	// Report is the run's report (what the script passed to report()), where the door
	// shows it (the daemon serves it at /api/runs/{id}/report instead); HasReport says
	// whether it has one.
	Report      any        `json:"report,omitempty" jsonschema_description:"what the script passed to report(): any JSON value"`
	HasReport   bool       `json:"has_report"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	ResumeAfter *time.Time `json:"resume_after,omitempty"`
	Phases      []Phase    `json:"phases,omitempty"`
	// ResumeWith is the command that resumes the run, when it can be resumed (the CLI).
	ResumeWith string `json:"resume_with,omitempty"`
	// Args are the run's args as it was started with them (the CLI).
	Args       any    `json:"args,omitempty" jsonschema_description:"the run's args: any JSON value"`
	ScriptHash string `json:"script_hash,omitempty"`
	PID        int    `json:"pid,omitempty"` // the process that drives it, while it runs
	// Node is the owner node: the node that drives the run or drove it last (SPEC §9);
	// LeaseUntil, when its node holds it under a lease, when that lease ends.
	Node       string     `json:"node,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Workspace is the workspace the run needs, once its agents used local tools or a
	// coding agent: only a node that serves it takes the run over. Waiting says, while no
	// node drives the run, that it waits for such a node and since when (WaitingAt).
	Workspace string `json:"workspace,omitempty"`
	Waiting   string `json:"waiting,omitempty"`
	// Hosted says whether the daemon that answers drives the run (the daemon API only).
	Hosted *bool `json:"hosted,omitempty"`
	// Pending are the tool calls waiting for a person's answer (status
	// awaiting_approval): `luft approve`, POST /api/runs/{id}/approve or the MCP tool
	// approve{run_id, approval_id, allow} answers one.
	Pending []Approval `json:"pending_approvals,omitempty"`
	// ID is RunID again, under the daemon API's key.
	ID string `json:"id"`
}

// Phase is one phase of a run, its id under phase_id (the key of the phase events and
// of the CLI) and id (the daemon API's and MCP's).
type Phase struct {
	PhaseID     int    `json:"phase_id"`
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
	Planned     int    `json:"planned"`
	Status      string `json:"status"`
	OK          int    `json:"ok"`
	Failed      int    `json:"failed"`
	Cancelled   int    `json:"cancelled"`
	ID          int    `json:"id"`
}

// Approval is a tool call waiting for a person's answer, its id under approval_id (the
// key the answer is sent with) and id (the daemon API's).
type Approval struct {
	ApprovalID string    `json:"approval_id"`
	CallKey    string    `json:"call_key"`
	Tool       string    `json:"tool"`
	Arguments  string    `json:"arguments"` // as the model sent them
	CreatedAt  time.Time `json:"created_at,omitzero"`
	ID         string    `json:"id"`
}

// NewRun is the part of the shape every door shows, from the stored run: no report,
// phases, approvals or door-specific fields.
func NewRun(r storage.Run) Run {
	v := Run{RunID: r.ID, ID: r.ID, Workflow: r.Workflow, Status: r.Status, Error: r.Error, Attempt: r.Attempt,
		Agents: r.Agents, Tokens: r.Usage.Input + r.Usage.Output, Usage: r.Usage, Cost: r.Cost,
		HasReport: r.HasReport, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, PID: r.PID, Node: r.Node,
		Workspace: r.Workspace}
	if !r.LeaseUntil.IsZero() {
		t := r.LeaseUntil
		v.LeaseUntil = &t
	}
	if !r.FinishedAt.IsZero() {
		t := r.FinishedAt
		v.FinishedAt = &t
	}
	if !r.ResumeAfter.IsZero() {
		t := r.ResumeAfter
		v.ResumeAfter = &t
	}
	return v
}

// WaitingAt is v with Waiting set as of now: why no node has taken r over
// (runtime.Waiting).
func (v Run) WaitingAt(r storage.Run, now time.Time) Run {
	v.Waiting = runtime.Waiting(r, now)
	return v
}

// WithReport is v with r's report, when it has one.
func (v Run) WithReport(r storage.Run) Run {
	if r.HasReport {
		v.Report = json.RawMessage(r.Report)
	}
	return v
}

// NewPhases is a run's phases in the shape.
func NewPhases(phases []storage.Phase) []Phase {
	var out []Phase
	for _, p := range phases {
		out = append(out, Phase{PhaseID: p.ID, ID: p.ID, Label: p.Label, Description: p.Description, Planned: p.Planned,
			Status: p.Status, OK: p.OK, Failed: p.Failed, Cancelled: p.Cancelled})
	}
	return out
}

// NewApprovals is a run's pending approvals in the shape.
func NewApprovals(pending []storage.Approval) []Approval {
	var out []Approval
	for _, a := range pending {
		out = append(out, Approval{ApprovalID: a.ID, ID: a.ID, CallKey: a.CallKey, Tool: a.Tool, Arguments: a.Arguments,
			CreatedAt: a.CreatedAt})
	}
	return out
}
