package luft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/runtime"
)

// Script says what to run.
type Script struct {
	// Path is the workflow file. With Source set it is only the script's name: in
	// messages, for workflow() calls (relative to its folder), and what a resume reads
	// (the copy pinned in the state dir stands in when the file does not exist).
	Path string
	// Source is the script itself; "" reads Path.
	Source string
	// Args is the script's args table: a value encoding/json encodes as an object or an
	// array (a map, a struct, a slice); nil gives an empty table.
	Args any
	// Backend and Model are the defaults of calls that name none; "" = Options.Backend
	// and the backend's model.
	Backend string
	Model   string
	// Class orders the run's turns in the scheduler: "interactive" (the default) goes
	// ahead of "batch", which ageing keeps from starving.
	Class string
	// Timeout is the wall-clock limit of the run (one attempt); 0 = none.
	Timeout time.Duration
	// MaxAgentCalls bounds agent() calls in the run; 0 = 10,000.
	MaxAgentCalls int
}

// Status is where a run is.
type Status string

// Run statuses. Interrupted is how Status and List show a run stored as running whose
// process is gone; it resumes.
const (
	StatusRunning     Status = "running"
	StatusCompleted   Status = "completed"
	StatusFailed      Status = "failed"
	StatusCancelled   Status = "cancelled"
	StatusSuspended   Status = "suspended"
	StatusInterrupted Status = "interrupted"
	// StatusAwaitingApproval is a running run with a tool call waiting for a person's
	// answer (Options.Approvals); Engine.Approve answers it.
	StatusAwaitingApproval Status = "awaiting_approval"
	// StatusIdle is a proxy run between turns: its last answer is with the client and
	// no turn of it is in flight (Engine.ProxyHandler).
	StatusIdle Status = "idle"
)

// AgentCounts count a run's agent calls by outcome; Cached ones were answered from the
// journal on resume without running, Cancelled ones were cut off by a cancel, a timeout
// or a suspension (they are not Failed). While a run goes on they count the calls
// finished so far.
type AgentCounts struct {
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cached    int `json:"cached"`
	Cancelled int `json:"cancelled"`
}

// Result is how a run (its latest attempt) ended.
type Result struct {
	RunID  string
	Status Status
	// Report is what the script passed to report(), as JSON decodes it (objects are
	// map[string]any, numbers float64); HasReport tells a nil report from none.
	Report    any
	HasReport bool
	Usage     Usage
	Cost      float64 // USD, of the calls whose backend prices them
	Agents    AgentCounts
	Elapsed   time.Duration
	Attempt   int // 1 for a run that was never resumed
	// ResumeAfter is when a suspended run can go on; zero otherwise.
	ResumeAfter time.Time
}

// Run is a run this Engine drives.
type Run struct {
	e  *Engine
	rt *runtime.Run
}

// ID is the run's id (a UUIDv7); any unique prefix of it names the run too.
func (r *Run) ID() string { return r.rt.ID }

// Attempt is 1 for a new run, and one more for each resume.
func (r *Run) Attempt() int { return r.rt.Attempt }

// Cancel stops the run: no new calls are admitted, calls in flight are cancelled, and
// the run ends as cancelled (it can be resumed). Wait returns once it has ended.
func (r *Run) Cancel() { r.rt.Cancel() }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.rt.Done() }

// Wait blocks until the run ends. The error is nil when it completed; otherwise it says
// why it did not: a *ScriptError, *LimitError, *BudgetError or *DivergenceError
// (errors.As), or one wrapping ErrCancelled, ErrTimeout, ErrSuspended or ErrShutdown
// (errors.Is). The Result is filled either way.
func (r *Run) Wait() (Result, error) {
	res := r.rt.Wait()
	return resultOf(res), r.e.withApprovalError(r.rt, typed(res.Err, r.rt.ID))
}

// Events streams the events of this attempt of the run, in order, from its run_started
// to its run_done; then the channel is closed. Each call is a stream of its own, from the
// start.
//
// Nothing is dropped: events are stored before they are sent, and a stream reads them
// from the store at its reader's pace. When the reader falls Options.EventBuffer events
// behind, its stream waits (backpressure) while the run goes on unhindered; the reader
// then gets every event it has not seen. A stream that is not read to its end holds a
// goroutine until the Engine is closed, when the channel is closed early.
func (r *Run) Events() <-chan Event {
	out := make(chan Event, r.e.opts.EventBuffer)
	in := r.rt.SubscribeAttempt(r.e.ctx)
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case out <- eventOf(ev):
			case <-r.e.ctx.Done():
				return
			}
		}
	}()
	return out
}

// Run runs s to its end and returns its result; see Run.Wait for the error. ctx ending
// cancels the run.
func (e *Engine) Run(ctx context.Context, s Script) (Result, error) {
	r, err := e.Start(ctx, s)
	if err != nil {
		return Result{}, err
	}
	return r.Wait()
}

// Start records a new run of s and runs it on its own goroutine; ctx ending cancels it.
// A script that does not compile is refused at once (a *ScriptError of kind "syntax")
// and nothing is recorded.
func (e *Engine) Start(ctx context.Context, s Script) (*Run, error) {
	done, err := e.starting(ctx, "Start")
	if err != nil {
		return nil, err
	}
	defer done()
	spec, err := e.spec(s)
	if err != nil {
		return nil, err
	}
	rt, err := e.svc.Start(ctx, spec)
	if err != nil {
		return nil, typed(err, "")
	}
	return e.run(rt), nil
}

// spec is the runtime's spec of s, with the Engine's defaults and the config's limits.
func (e *Engine) spec(s Script) (runtime.Spec, error) {
	if s.Source == "" && s.Path == "" {
		return runtime.Spec{}, errors.New("luft: Script has neither Source nor Path; give the workflow's Lua source or its file")
	}
	class := agent.Class(s.Class)
	switch class {
	case "", agent.ClassInteractive, agent.ClassBatch:
	default:
		return runtime.Spec{}, fmt.Errorf("luft: Script.Class %q is not a class; use %q or %q", s.Class, agent.ClassInteractive, agent.ClassBatch)
	}
	if s.Timeout < 0 {
		return runtime.Spec{}, fmt.Errorf("luft: Script.Timeout %s is negative (0 = no limit)", s.Timeout)
	}
	if err := config.CheckRange(s.MaxAgentCalls, 0, config.MaxAgentCalls); err != nil {
		return runtime.Spec{}, fmt.Errorf("luft: Script.MaxAgentCalls: %v", err)
	}
	backend := s.Backend
	if backend == "" {
		backend = e.opts.Backend
	}
	if _, err := e.registry.Get(backend); err != nil {
		return runtime.Spec{}, fmt.Errorf("luft: Script.Backend: %w", err)
	}
	args, err := argsOf(s.Args)
	if err != nil {
		return runtime.Spec{}, err
	}
	spec := runtime.Spec{Path: s.Path, Args: args, Backend: backend, Model: s.Model, Class: class,
		Concurrency: e.opts.Concurrency, Timeout: s.Timeout, Limits: host.ScriptLimits(e.cfg.Limits, s.MaxAgentCalls)}
	if s.Source != "" {
		spec.Source = []byte(s.Source)
	}
	return spec, nil
}

// argsOf is a script's args as the runtime takes them: decoded JSON, an object or an
// array, so a Go struct reaches the script as the table its JSON is.
func argsOf(v any) (any, error) {
	if v == nil {
		return map[string]any{}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("luft: Script.Args cannot be encoded as JSON: %v", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("luft: Script.Args: %v", err)
	}
	switch out.(type) {
	case map[string]any, []any:
		return out, nil
	case nil:
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("luft: Script.Args must encode as a JSON object or array (a map or a struct), got %.40s", b)
}

// ResumeOptions say how to resume a run.
type ResumeOptions struct {
	// AllowChangedScript runs the workflow file as it is now when it changed since the
	// run started; calls whose inputs changed are then divergence.
	AllowChangedScript bool
	// RerunFromDivergence drops the journal from the first call whose inputs differ,
	// instead of failing with a *DivergenceError.
	RerunFromDivergence bool
}

// Resume runs a stopped run (interrupted, failed, cancelled or suspended) again from the
// top: every call its journal holds as finished returns its recorded result at once,
// without the scheduler or a backend, and the rest run. runID may be a unique prefix.
// A run that has already completed is not run again: the returned Run has ended with
// its stored result. ctx ending cancels the run.
func (e *Engine) Resume(ctx context.Context, runID string, opts ...ResumeOptions) (*Run, error) {
	done, err := e.starting(ctx, "Resume")
	if err != nil {
		return nil, err
	}
	defer done()
	if runID == "" {
		return nil, errors.New("luft: Resume: the run id is empty; List shows the runs")
	}
	if len(opts) > 1 {
		return nil, errors.New("luft: Resume: give at most one ResumeOptions")
	}
	var o ResumeOptions
	if len(opts) == 1 {
		o = opts[0]
	}
	rt, err := e.svc.Resume(ctx, runtime.ResumeSpec{Run: runID, AllowChangedScript: o.AllowChangedScript, RerunFromDivergence: o.RerunFromDivergence})
	if err != nil {
		return nil, typed(err, runID)
	}
	return e.run(rt), nil
}

// run is rt as a *Run, its approvals put to Options.Approve when that is set.
func (e *Engine) run(rt *runtime.Run) *Run {
	if e.opts.Approve != nil {
		e.watchApprovals(rt)
	}
	return &Run{e: e, rt: rt}
}

// Cancel stops a run by id: at once when this Engine drives it, otherwise by a request
// the process driving it picks up.
func (e *Engine) Cancel(ctx context.Context, runID string) error {
	if err := e.use(ctx, "Cancel"); err != nil {
		return err
	}
	_, err := e.svc.Cancel(ctx, runID)
	return typed(err, runID)
}

func resultOf(r runtime.Result) Result {
	out := Result{RunID: r.RunID, Status: Status(r.Status), Usage: Usage(r.Usage), Cost: r.Cost,
		Agents: AgentCounts(r.Agents), Elapsed: r.Elapsed, Attempt: r.Attempt, ResumeAfter: r.ResumeAfter}
	out.Report, out.HasReport = decoded(r.Report, r.HasReport)
	return out
}

// decoded is a report as JSON decodes it, so a live run's report and a stored one's
// have the same Go types.
func decoded(v any, has bool) (any, bool) {
	if !has {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v, true
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v, true
	}
	return out, true
}
