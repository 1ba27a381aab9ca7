package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// BackendSource resolves a backend id ("" = the default) to a backend.
type BackendSource interface {
	Get(id string) (adapters.Backend, error)
}

// Options configure an Engine.
type Options struct {
	Backends  BackendSource
	Scheduler scheduler.Scheduler // default: a Gate of 8
	Events    storage.EventLog    // default: in memory
	Now       func() time.Time    // default: time.Now
	Caller    string              // who starts runs ("cli", an MCP session id, ...)
	// ReadFile reads workflow files; default os.ReadFile.
	ReadFile func(path string) ([]byte, error)
	// Backoff is the wait before retry attempt n (n >= 2) of a failed call; default
	// exponential from 200 ms with jitter, capped at 10 s.
	Backoff func(attempt int) time.Duration
}

// Engine starts and drives runs. One Engine per process; it is safe for concurrent use.
type Engine struct {
	opts Options
}

// New returns an Engine.
func New(opts Options) *Engine {
	if opts.Scheduler == nil {
		opts.Scheduler = scheduler.NewGate(8)
	}
	if opts.Events == nil {
		opts.Events = storage.NewMemory()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	if opts.Backoff == nil {
		opts.Backoff = defaultBackoff
	}
	if opts.Caller == "" {
		opts.Caller = "local"
	}
	return &Engine{opts: opts}
}

// Spec says what to run.
type Spec struct {
	Path        string // workflow file
	Source      []byte // the script itself; when nil it is read from Path
	Args        any    // decoded --args JSON
	Backend     string // default backend for calls that name none
	Model       string // default model for calls that name none
	Class       agent.Class
	Concurrency int           // pipeline default max_inflight; the scheduler owns real slots
	Timeout     time.Duration // wall-clock limit of the whole run; 0 = none
	Limits      lua.Limits
}

// Status of a run.
type Status string

// Run statuses.
const (
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	StatusSuspended Status = "suspended"
)

// Counts of agent calls by outcome.
type Counts struct {
	OK     int `json:"ok"`
	Failed int `json:"failed"`
	Cached int `json:"cached"`
}

// Result is how a run ended.
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
}

// Causes a run can be stopped for.
var (
	ErrCancelled  = errors.New("cancelled by request")
	ErrTimeout    = errors.New("the run reached its --timeout")
	ErrTimeBudget = errors.New("the run's time budget (budget.time_ms) is used up")
)

// Run is one started run.
type Run struct {
	ID     string
	spec   Spec
	bus    *bus
	cancel context.CancelCauseFunc
	done   chan struct{}
	result Result
}

// Load reads and compiles a workflow without running it. Errors are the caller's input
// errors: a missing file or a syntax error (a *lua.ScriptError of kind syntax).
func (e *Engine) Load(spec Spec) (*lua.Program, error) {
	src := spec.Source
	if src == nil {
		b, err := e.opts.ReadFile(spec.Path)
		if err != nil {
			return nil, fmt.Errorf("read workflow %s: %w", spec.Path, err)
		}
		src = b
	}
	name := spec.Path
	if name == "" {
		name = "workflow.lua"
	}
	return lua.Compile(name, spec.Path, src)
}

// Start compiles the workflow and starts it on its own goroutine. A compile error is
// returned at once and nothing runs.
func (e *Engine) Start(ctx context.Context, spec Spec) (*Run, error) {
	prog, err := e.Load(spec)
	if err != nil {
		return nil, err
	}
	if spec.Class == "" {
		spec.Class = agent.ClassInteractive
	}
	if spec.Concurrency <= 0 {
		spec.Concurrency = 8
	}
	id := uuid.Must(uuid.NewV7()).String()
	rctx, cancel := context.WithCancelCause(ctx)
	if spec.Timeout > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeoutCause(rctx, spec.Timeout, ErrTimeout)
		_ = stop // released with rctx when the run's cancel runs
	}
	r := &Run{ID: id, spec: spec, bus: newBus(e.opts.Events, id, e.opts.Now), cancel: cancel, done: make(chan struct{})}
	go r.execute(rctx, e, prog)
	return r, nil
}

// Subscribe streams the run's events with seq > since, in order, ending after run_done.
func (r *Run) Subscribe(ctx context.Context, since int64) <-chan event.Event {
	return r.bus.subscribe(ctx, since)
}

// Cancel stops the run: no new calls are admitted, in-flight calls are cancelled, and the
// run ends as cancelled.
func (r *Run) Cancel() { r.cancel(ErrCancelled) }

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait blocks until the run ends and returns its result.
func (r *Run) Wait() Result {
	<-r.done
	return r.result
}

func (r *Run) execute(ctx context.Context, e *Engine, prog *lua.Program) {
	defer close(r.done)
	defer r.cancel(nil)
	start := e.opts.Now()
	h := &host{e: e, run: r, ctx: ctx, start: start}
	r.bus.emit(event.New(event.RunStarted, map[string]any{"workflow": r.spec.Path, "args": r.spec.Args, "resumed": false}))
	out, err := lua.Run(ctx, lua.Config{
		Host: h, Limits: r.spec.Limits, RunID: r.ID, Attempt: 1,
		Concurrency: r.spec.Concurrency, Args: r.spec.Args, Now: e.opts.Now,
	}, prog)
	h.stopTimer()
	status, runErr := classify(err, ctx)
	// The VM is done; calls it abandoned were cancelled with it. Wait for them so their
	// agent_done events come before run_done and count in the totals.
	r.cancel(ErrCancelled)
	h.calls.Wait()
	res := h.result()
	res.RunID = r.ID
	res.Elapsed = e.opts.Now().Sub(start)
	res.Status, res.Err = status, runErr
	if res.Status == StatusCompleted {
		res.Report, res.HasReport = out.Report, out.HasReport
	}
	if r.bus.err != nil && res.Err == nil {
		res.Status, res.Err = StatusFailed, fmt.Errorf("record events: %w", r.bus.err)
	}
	if res.Status == StatusSuspended {
		r.bus.emit(event.New(event.RunSuspended, map[string]any{"reason": res.Err.Error()}))
	}
	done := map[string]any{
		"status": string(res.Status), "report": res.Report, "tokens": res.Usage.Total(),
		"usage": res.Usage, "cost": res.Cost, "elapsed_ms": res.Elapsed.Milliseconds(),
		"agents": res.Agents,
	}
	if res.Err != nil {
		done["error"] = res.Err.Error()
	}
	r.bus.emit(event.New(event.RunDone, done))
	r.result = res
	r.bus.close()
}

// classify maps how the VM ended to a run status.
func classify(err error, ctx context.Context) (Status, error) {
	if err == nil {
		return StatusCompleted, nil
	}
	if lua.ErrorKindOf(err) == lua.KindCancelled || (ctx.Err() != nil && lua.ErrorKindOf(err) == "") {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrTimeBudget):
			return StatusSuspended, ErrTimeBudget
		case errors.Is(cause, ErrTimeout):
			return StatusFailed, ErrTimeout
		case errors.Is(cause, ErrCancelled) || errors.Is(cause, context.Canceled):
			return StatusCancelled, ErrCancelled
		}
	}
	return StatusFailed, err
}

func defaultBackoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << min(attempt-2, 6)
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	// Full jitter keeps many failing calls from retrying in lockstep.
	return time.Duration(float64(d) * (0.5 + 0.5*rand.Float64()))
}
