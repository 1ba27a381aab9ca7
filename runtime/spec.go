package runtime

import (
	"errors"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Spec says what to run. It is stored with the run, so a resume runs it the same way.
type Spec struct {
	Path        string        `json:"path"`              // workflow file
	Source      []byte        `json:"-"`                 // the script itself; when nil it is read from Path
	Args        any           `json:"args,omitempty"`    // decoded --args JSON
	Backend     string        `json:"backend,omitempty"` // default backend for calls that name none
	Model       string        `json:"model,omitempty"`   // default model for calls that name none
	Class       agent.Class   `json:"class,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"` // pipeline default max_inflight
	Timeout     time.Duration `json:"timeout,omitempty"`     // wall-clock limit of one attempt; 0 = none
	Limits      lua.Limits    `json:"limits"`
	// Caller is who the run's turns are fair-shared as in the scheduler (a daemon hosts
	// runs of many callers); "" = Options.Caller.
	Caller string `json:"caller,omitempty"`
	// Unattended says no one answers this run's approvals (a luft run without a terminal
	// hosted by the daemon): a call that needs one fails as without Options.AskApprovals.
	Unattended bool `json:"unattended,omitempty"`
	// Quiet says the script was read from a file named by someone who may not be shown
	// its contents (a path given through MCP): its syntax errors name the file and line,
	// never its tokens (lua.CompileFile).
	Quiet bool `json:"quiet,omitempty"`
	// Plan, when set, is how the script was planned from a task in words: its calls are
	// journaled with the run (kind "plan") and the script is pinned as the run's
	// workflow.lua in its folder, so a resume runs that script and never plans again.
	Plan *Plan `json:"plan,omitempty"`
	// PlanFailed marks a run recorded by FailedPlan: its planning found no script.
	PlanFailed bool `json:"plan_failed,omitempty"`
}

// Plan records the planner's work for a planned run.
type Plan struct {
	Task    string     `json:"task"`
	Planner string     `json:"planner"` // "template", or the backend/model that planned
	Calls   []PlanCall `json:"calls,omitempty"`
}

// PlanCall is one model request of the planner: a plan attempt or an auto-fix.
type PlanCall struct {
	Key    string      `json:"key"`    // plan/N or fix/N
	Prompt string      `json:"prompt"` // the request's hash input: system + user prompt
	Reply  string      `json:"reply"`
	Reason string      `json:"reason,omitempty"` // why its script was rejected; "" = accepted
	Usage  agent.Usage `json:"usage"`
	Cost   float64     `json:"cost,omitempty"` // USD, when the backend prices its tokens
}

// ResumeSpec says which run to resume and how.
type ResumeSpec struct {
	Run                 string // id, unique id prefix, or "" for the newest unfinished run
	AllowChangedScript  bool   // run a script that changed since the run started
	RerunFromDivergence bool   // drop the journal from the first call whose inputs differ
	// Source, when set, is the script to run in place of the main workflow file (an
	// auto-fixed script); it is pinned as the run's script, so it needs AllowChangedScript
	// when it differs from the pinned one.
	Source []byte
	// Repeated holds start settings the caller gave again, by the name of luft run's
	// flag (workflow, args, backend, model, class, timeout, max-agent-calls) with the
	// value as given (args as JSON; a workflow path relative to this process's folder). A
	// value equal to the run's own is no change and is accepted; a different one refuses
	// the resume with ErrSettingChanged, since the run goes on with the settings it was
	// started with.
	Repeated map[string]string
}

// Status of a run.
type Status string

// Run statuses.
const (
	StatusRunning   Status = storage.StatusRunning
	StatusCompleted Status = storage.StatusCompleted
	StatusFailed    Status = storage.StatusFailed
	StatusCancelled Status = storage.StatusCancelled
	StatusSuspended Status = storage.StatusSuspended
)

// Counts of agent calls by outcome.
type Counts = storage.AgentCounts

// Result is how a run (one attempt of it) ended.
type Result struct {
	RunID     string
	Status    Status
	Report    any
	HasReport bool
	Err       error // nil when completed; a *lua.ScriptError for script failures
	Usage     agent.Usage
	Cost      float64
	Agents    Counts
	Elapsed   time.Duration
	Attempt   int
	// ResumeAfter is when a run the scheduler suspended can go on (its rate-limit
	// budget is back); zero otherwise.
	ResumeAfter time.Time
}

// Causes a run can be stopped for.
var (
	ErrCancelled  = errors.New("cancelled by request")
	ErrTimeout    = errors.New("the run reached its --timeout")
	ErrTimeBudget = errors.New("the run's time budget (budget.time_ms) is used up")
	// ErrSuspended is the cause of a run the scheduler suspended: a turn's wait for its
	// lane's rate-limit budget would exceed suspend_after. The error that carries it
	// wraps the *scheduler.SuspendError with the resume time.
	ErrSuspended = errors.New("suspended by the scheduler")
	// ErrShutdown is the cause of a run its host suspended while shutting down (the
	// daemon on SIGTERM): the journal holds every finished call, so a resume goes on.
	ErrShutdown = errors.New("suspended: its host shut down")
)

// suspension is the cancel cause of a run the scheduler suspended.
type suspension struct{ *scheduler.SuspendError }

func (s suspension) Error() string        { return s.Detail() }
func (s suspension) Is(target error) bool { return target == ErrSuspended }
func (s suspension) Unwrap() error        { return s.SuspendError }

// Errors of Resume that callers test for.
var (
	ErrNotResumable  = errors.New("run cannot be resumed")
	ErrScriptChanged = errors.New("script changed since the run started")
	ErrStillRunning  = errors.New("run is still running")
	// ErrSettingChanged: ResumeSpec.Repeated gave a start setting a value other than
	// the run's own.
	ErrSettingChanged = errors.New("a resumed run runs with the settings it was started with")
)
