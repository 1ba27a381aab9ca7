package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// Options configure a Service.
type Options struct {
	Store     storage.Store       // required: runs, events and the journal
	StateDir  string              // where copies of each run's scripts go (runs/<id>/); "" = none
	Backends  BackendSource       // required
	Scheduler scheduler.Scheduler // admits every model turn; default: an Executor, 8 slots per lane
	Now       func() time.Time    // default: Clock.Now
	// Clock times every wait of a run (timeout_ms, budgets, --timeout, retry backoff,
	// polls); default: the wall clock, reading the time from Now when that is set.
	Clock  scheduler.Clock
	Caller string // who starts runs ("cli", an MCP session id, ...)
	// ReadFile reads the main workflow file and, on resume, the files a run pinned;
	// default os.ReadFile. Files loaded by workflow() are always read from inside the
	// calling script's folder (readWorkflowFile), never through this.
	ReadFile func(path string) ([]byte, error)
	// Backoff is the wait before retry attempt n (n >= 2) of a failed call; default
	// exponential from 200 ms with jitter, capped at 10 s.
	Backoff func(attempt int) time.Duration
	// CancelPoll is how often a run looks for a cancel request made by another process;
	// default 250 ms.
	CancelPoll time.Duration
	// PID is the process id recorded as a run's owner; default os.Getpid().
	PID int
	// Events bounds what each run records; zero fields take DefaultEventLimits.
	Events EventLimits
	// AskApprovals parks a destructive tool call under [tools] approval = "ask" until
	// Approve answers it (the run shows awaiting_approval). Set it where someone can
	// answer: the daemon, an MCP server, a terminal's live view. Without it such a call
	// fails its agent call with *tools.ApprovalError, so a non-interactive run never
	// waits for an answer no one can give.
	AskApprovals bool
}

// Service starts, resumes and inspects runs: the one surface the CLI, the MCP server, the
// daemon and the Go API use. One Service per process; it is safe for concurrent use.
type Service struct {
	opts Options

	mu        sync.Mutex
	live      map[string]*Run                    // runs driven by this process
	approvals map[string][]chan storage.Approval // run id/approval id → calls parked on it
	hosted    map[string]int                     // runs a door of this process drives without a script (Host)

	quiesced atomic.Bool // Quiesce was called
}

// Quiesce stops the runs of this Service from going into new work while their host
// shuts down: from now on a run that reaches phase() is suspended there, without
// starting the phase (a resume starts it). Calls already going are left to finish; the
// host also stops admitting turns (the daemon's Gate).
func (s *Service) Quiesce() { s.quiesced.Store(true) }

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("runtime: Options.Store is nil")
	}
	if opts.Backends == nil {
		return nil, errors.New("runtime: Options.Backends is nil")
	}
	if opts.Scheduler == nil {
		opts.Scheduler = scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 8}}, nil)
	}
	switch {
	case opts.Clock != nil && opts.Now == nil:
		opts.Now = opts.Clock.Now
	case opts.Clock == nil && opts.Now != nil:
		opts.Clock = nowClock{opts.Now}
	case opts.Clock == nil:
		opts.Clock, opts.Now = scheduler.RealClock(), time.Now
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
	if opts.CancelPoll <= 0 {
		opts.CancelPoll = 250 * time.Millisecond
	}
	if opts.PID == 0 {
		opts.PID = os.Getpid()
	}
	return &Service{opts: opts, live: map[string]*Run{}, hosted: map[string]int{}}, nil
}

// Host marks run id as driven by this process though no script of this Service drives it
// (a run of the proxy door, whose agent keeps its own loop), so Status and List show it
// running rather than interrupted; call release when the run ends.
func (s *Service) Host(id string) (release func()) {
	s.mu.Lock()
	s.hosted[id]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hosted[id]--; s.hosted[id] <= 0 {
				delete(s.hosted, id)
			}
			s.mu.Unlock()
		})
	}
}

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

// Run is one run driven by this process.
type Run struct {
	ID      string
	Attempt int
	spec    Spec
	bus     *bus
	cancel  context.CancelCauseFunc
	done    chan struct{}
	result  Result
	already bool // completed before this process resumed it: nothing ran
	// tally returns the counts, tokens and cost so far while the run goes on; set once
	// its host exists, read under the Service's mu.
	tally func() Result
}

// Subscribe streams the run's events with seq > since, in order, ending after run_done.
func (r *Run) Subscribe(ctx context.Context, since int64) <-chan event.Event {
	return r.bus.subscribe(ctx, since)
}

// SubscribeAttempt is Subscribe from the start of this attempt: a resumed run's earlier
// attempts (and their run_done) are left out.
func (r *Run) SubscribeAttempt(ctx context.Context) <-chan event.Event {
	in := r.Subscribe(ctx, 0)
	if r.Attempt <= 1 {
		return in
	}
	out := make(chan event.Event, 64)
	go func() {
		defer close(out)
		current := false
		for ev := range in {
			current = current || ev.Type == event.RunStarted && AttemptOf(ev) == r.Attempt
			if !current {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Cancel stops the run: no new calls are admitted, in-flight calls are cancelled, and the
// run ends as cancelled.
func (r *Run) Cancel() { r.cancel(ErrCancelled) }

// Suspend stops the run as Cancel does, but it ends as suspended: its host is going away
// and the run is to go on later (the daemon resumes it when it starts again).
func (r *Run) Suspend() { r.cancel(ErrShutdown) }

// Live returns the runs this process drives now.
func (s *Service) Live() []*Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Run, 0, len(s.live))
	for _, r := range s.live {
		out = append(out, r)
	}
	return out
}

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait blocks until the run ends and returns its result.
func (r *Run) Wait() Result {
	<-r.done
	return r.result
}

// Load reads and compiles a workflow without running it. Errors are the caller's input
// errors: a missing file or a syntax error (a *lua.ScriptError of kind syntax).
func (s *Service) Load(spec Spec) (*lua.Program, []byte, error) {
	src := spec.Source
	if src == nil {
		b, err := s.opts.ReadFile(spec.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("read workflow %s: %w", spec.Path, err)
		}
		src = b
	}
	name := spec.Path
	if name == "" {
		name = "workflow.lua"
	}
	if spec.Quiet {
		prog, err := lua.CompileFile(name, src)
		return prog, src, err
	}
	prog, err := lua.Compile(name, spec.Path, src)
	return prog, src, err
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Start records a new run, then runs it on its own goroutine. A compile error is returned
// at once and nothing is recorded.
func (s *Service) Start(ctx context.Context, spec Spec) (*Run, error) {
	prog, src, err := s.Load(spec)
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
	if spec.Plan != nil && s.opts.StateDir != "" {
		// A planned script lives in its run's folder: the user can edit it there and rerun
		// it with --workflow, and a resume reads it from there.
		spec.Path = filepath.Join(s.RunDir(id), "workflow.lua")
	}
	if spec.Path == "" {
		spec.Path = "workflow.lua" // the name the script is pinned and resumed under
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("start run: encode its spec: %w", err)
	}
	argsJSON, _ := json.Marshal(spec.Args)
	if err := s.opts.Store.CreateRun(ctx, storage.Run{
		ID: id, Workflow: spec.Path, ScriptHash: sha(src), Status: storage.StatusRunning,
		Args: argsJSON, Attempt: 1, PID: s.opts.PID, Spec: specJSON,
	}); err != nil {
		return nil, fmt.Errorf("start run: %w", err)
	}
	if err := s.pin(ctx, id, spec.Path, src); err != nil {
		return nil, err
	}
	if spec.Plan != nil {
		if err := s.JournalPlan(ctx, id, spec.Plan.Calls); err != nil {
			return nil, err
		}
	}
	return s.launch(ctx, id, 1, spec, prog, nil, nil, ResumeSpec{}), nil
}

// pin stores a copy of a script the run loaded, in the store and under runs/<id>/.
func (s *Service) pin(ctx context.Context, id, path string, src []byte) error {
	if _, err := s.opts.Store.SaveFile(ctx, id, path, src); err != nil {
		return fmt.Errorf("run %s: pin %s: %w", id, path, err)
	}
	if s.opts.StateDir == "" {
		return nil
	}
	dir := s.RunDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return storage.Unwritable(s.opts.StateDir, fmt.Sprintf("run %s: pin %s", id, path), err)
	}
	name := strings.NewReplacer("/", "__", `\`, "__", "..", "up").Replace(filepath.ToSlash(filepath.Clean(path)))
	if filepath.Dir(path) == dir {
		name = filepath.Base(path) // a planned script, already in the run's folder
	}
	if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
		return storage.Unwritable(s.opts.StateDir, fmt.Sprintf("run %s: pin %s", id, path), err)
	}
	return nil
}

// Resume runs a stopped run again from the top: every call the journal has completed
// returns its recorded result without the scheduler or a backend. A run that has already
// completed is not run again: the returned Run has ended with the stored result
// (AlreadyCompleted).
func (s *Service) Resume(ctx context.Context, rs ResumeSpec) (*Run, error) {
	st := s.opts.Store
	var (
		row storage.Run
		err error
	)
	if rs.Run == "" {
		row, err = s.newestResumable(ctx)
		if errors.Is(err, storage.ErrRunNotFound) {
			return nil, fmt.Errorf("resume: no unfinished run to resume: %w", err)
		}
	} else {
		row, err = st.ResolveRun(ctx, rs.Run)
	}
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", rs.Run, err)
	}
	// Settle only a run whose process is gone: a run another process has just claimed may
	// not have stored its run_started yet, and its row must not be taken for a dead one.
	if row.Status == storage.StatusRunning && !s.driven(row) {
		if row, err = s.settle(ctx, row); err != nil {
			return nil, err
		}
	}
	if len(rs.Repeated) > 0 {
		var started Spec
		if err := json.Unmarshal(row.Spec, &started); err != nil {
			return nil, fmt.Errorf("run %s: resume: its stored spec is unreadable: %w", row.ID, err)
		}
		if err := sameSettings(started, rs.Repeated); err != nil {
			return nil, fmt.Errorf("run %s: resume refused: %w", row.ID, err)
		}
	}
	if row.Status == storage.StatusCompleted {
		return s.completed(row), nil
	}
	if !row.Resumable() {
		return nil, fmt.Errorf("run %s: resume refused: it is %s (only running, failed, cancelled and suspended runs resume): %w", row.ID, row.Status, ErrNotResumable)
	}
	// Asked again of the settled row: another process may have claimed the run meanwhile.
	if s.driven(row) {
		return nil, fmt.Errorf("run %s: resume refused: process %d is still running it (stop it with luft cancel %s): %w", row.ID, row.PID, short(row.ID), ErrStillRunning)
	}
	var spec Spec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		return nil, fmt.Errorf("run %s: resume: its stored spec is unreadable: %w", row.ID, err)
	}
	files, err := st.Files(ctx, row.ID)
	if err != nil {
		return nil, fmt.Errorf("run %s: resume: %w", row.ID, err)
	}
	if spec.PlanFailed {
		return nil, fmt.Errorf("run %s: resume refused: its planning found no valid workflow, so it has no script to run "+
			"(plan again with luft run %q, perhaps with a stronger --planner-model, or write the workflow and run it with --workflow): %w",
			short(row.ID), spec.Plan.Task, ErrNotResumable)
	}
	pinned := map[string]storage.File{}
	for _, f := range files {
		pinned[f.Path] = f
	}
	// Every file the run loaded must be unchanged, unless the caller accepts changes.
	var src []byte
	for _, f := range files {
		var cur []byte
		var rerr error
		if f.Path == spec.Path && rs.Source != nil {
			cur = rs.Source
		} else if f.Path == spec.Path {
			cur, rerr = s.opts.ReadFile(f.Path)
		} else {
			// A sub-workflow is read as workflow() reads it: from inside the main
			// script's folder, so a file swapped for a symlink out of it since the
			// run started is never read, let alone pinned.
			cur, rerr = readPinnedWorkflow(filepath.Dir(spec.Path), f.Path)
		}
		switch {
		case rerr != nil:
			cur = f.Content // gone from disk: the pinned copy is the script
		case sha(cur) != f.SHA256 && !rs.AllowChangedScript:
			return nil, fmt.Errorf("run %s: resume refused: %s changed since the run started (use --allow-changed-script to run the new version; calls whose inputs changed then count as divergence): %w", short(row.ID), f.Path, ErrScriptChanged)
		case sha(cur) != f.SHA256:
			// The new version is what this attempt runs, so it is what a later resume
			// compares against.
			if err := s.pin(ctx, row.ID, f.Path, cur); err != nil {
				return nil, err
			}
		}
		if f.Path == spec.Path {
			src = cur
		}
	}
	if src == nil {
		// The process died between recording the run and pinning its script, so no call
		// ran: the file on disk is the script it was started with.
		if src, err = s.opts.ReadFile(spec.Path); err != nil {
			return nil, fmt.Errorf("run %s: resume: its script was never pinned and cannot be read: %w", row.ID, err)
		}
		if err := s.pin(ctx, row.ID, spec.Path, src); err != nil {
			return nil, err
		}
	}
	spec.Source = src
	prog, _, err := s.Load(spec)
	if err != nil {
		return nil, err
	}
	entries, err := st.Journal(ctx, row.ID)
	if err != nil {
		return nil, fmt.Errorf("run %s: resume: %w", row.ID, err)
	}
	journal := make(map[string]storage.Entry, len(entries))
	for _, e := range entries {
		journal[e.CallKey] = e
	}
	attempt := row.Attempt + 1
	running, clear, zero, pid := storage.StatusRunning, "", time.Time{}, s.opts.PID
	no := false
	hash := sha(src)
	if err := st.UpdateRun(ctx, row.ID, storage.RunUpdate{Status: &running, Error: &clear, Attempt: &attempt,
		PID: &pid, FinishedAt: &zero, ResumeAfter: &zero, CancelRequested: &no, ScriptHash: &hash,
		IfAttempt: &row.Attempt}); err != nil {
		if errors.Is(err, storage.ErrRunChanged) {
			return nil, fmt.Errorf("run %s: resume refused: another process resumed it first: %w", row.ID, ErrStillRunning)
		}
		return nil, fmt.Errorf("run %s: resume: %w", row.ID, err)
	}
	return s.launch(ctx, row.ID, attempt, spec, prog, journal, pinned, rs), nil
}

// completed is a run that has already completed, as a *Run that has ended: resuming it
// again runs nothing (SPEC §1: a resume is idempotent). Wait returns its stored result and
// report; Subscribe replays its stored events.
func (s *Service) completed(row storage.Run) *Run {
	r := &Run{ID: row.ID, Attempt: row.Attempt, cancel: func(error) {}, done: make(chan struct{}),
		bus: newBus(s.opts.Store, row.ID, s.opts.Now, s.opts.Events, nil), already: true}
	r.bus.close()
	r.result = Result{RunID: row.ID, Status: StatusCompleted, Usage: agent.Usage(row.Usage), Cost: row.Cost,
		Agents: row.Agents, Attempt: row.Attempt}
	if !row.FinishedAt.IsZero() {
		r.result.Elapsed = row.FinishedAt.Sub(row.CreatedAt)
	}
	if row.HasReport && json.Unmarshal(row.Report, &r.result.Report) == nil {
		r.result.HasReport = true
	}
	close(r.done)
	return r
}

// AlreadyCompleted reports whether the run had completed before Resume was asked for it,
// so nothing ran: its result is the stored one.
func (r *Run) AlreadyCompleted() bool { return r.already }

// settle finishes the record of a run whose process stored its run_done but died before
// it updated the run's row: the last attempt's outcome is in run_done.
func (s *Service) settle(ctx context.Context, row storage.Run) (storage.Run, error) {
	evs, err := s.opts.Store.EventsOfType(ctx, row.ID, 0, 0, []string{event.RunStarted, event.RunDone})
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != event.RunDone {
		return row, nil
	}
	d := evs[len(evs)-1].Data
	status, _ := d["status"].(string)
	msg, _ := d["error"].(string)
	up := storage.RunUpdate{Status: &status, Error: &msg, IfAttempt: &row.Attempt}
	var u storage.Usage
	var agents storage.AgentCounts
	if b, err := json.Marshal(d["usage"]); err == nil && json.Unmarshal(b, &u) == nil {
		up.Usage = &u
	}
	if b, err := json.Marshal(d["agents"]); err == nil && json.Unmarshal(b, &agents) == nil {
		up.Agents = &agents
	}
	if cost, ok := d["cost"].(float64); ok {
		up.Cost = &cost
	}
	if rep, ok := d["report"]; ok && rep != nil && status == storage.StatusCompleted {
		if b, err := json.Marshal(rep); err == nil {
			raw := json.RawMessage(b)
			up.Report = &raw
		}
	}
	if err := s.opts.Store.UpdateRun(ctx, row.ID, up); err != nil {
		if errors.Is(err, storage.ErrRunChanged) {
			return row, fmt.Errorf("run %s: resume refused: another process resumed it first: %w", row.ID, ErrStillRunning)
		}
		return row, fmt.Errorf("run %s: settle its record: %w", row.ID, err)
	}
	return s.opts.Store.GetRun(ctx, row.ID)
}

// alive reports whether pid, recorded as the owner of a running run, still drives it.
func (s *Service) alive(id string, pid int) bool {
	if pid == s.opts.PID {
		s.mu.Lock()
		_, ok := s.live[id]
		ok = ok || s.hosted[id] > 0
		s.mu.Unlock()
		return ok
	}
	return processAlive(pid)
}

// driven reports whether a live process, this one or another, drives the run.
func (s *Service) driven(r storage.Run) bool {
	return r.Status == storage.StatusRunning && r.PID != 0 && s.alive(r.ID, r.PID)
}

// newestResumable is the newest run that may be resumed and that no live process drives.
func (s *Service) newestResumable(ctx context.Context) (storage.Run, error) {
	runs, err := s.opts.Store.ListRuns(ctx, storage.ListOptions{Limit: 500})
	if err != nil {
		return storage.Run{}, err
	}
	for _, r := range runs {
		if r.Resumable() && !s.driven(r) && !PlanFailed(r) {
			return r, nil
		}
	}
	return storage.Run{}, storage.ErrRunNotFound
}

// PlanFailed reports whether r is a run FailedPlan recorded: there is nothing to resume.
func PlanFailed(r storage.Run) bool {
	var spec struct {
		PlanFailed bool `json:"plan_failed"`
	}
	return json.Unmarshal(r.Spec, &spec) == nil && spec.PlanFailed
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func (s *Service) launch(ctx context.Context, id string, attempt int, spec Spec, prog *lua.Program,
	journal map[string]storage.Entry, pinned map[string]storage.File, rs ResumeSpec) *Run {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var deadline scheduler.Timer
	if spec.Timeout > 0 {
		deadline = s.opts.Clock.AfterFunc(spec.Timeout, func() { cancel(fmt.Errorf("%w (%s)", ErrTimeout, spec.Timeout)) })
	}
	r := &Run{ID: id, Attempt: attempt, spec: spec, cancel: cancel, done: make(chan struct{})}
	// A run that reaches an event limit ends with the limit as its error.
	r.bus = newBus(s.opts.Store, id, s.opts.Now, s.opts.Events, func(err error) { r.cancel(err) })
	// Events that cannot be stored stop the run as the journal's failures do.
	r.bus.fail = func(err error) {
		if storage.Broken(err) {
			cancel(err)
		}
	}
	s.mu.Lock()
	s.live[id] = r
	s.mu.Unlock()
	// The caller's context ends the run like a cancel does.
	stop := context.AfterFunc(ctx, func() { r.cancel(ErrCancelled) })
	h := newHost(s, r, rctx, journal, pinned, rs)
	s.mu.Lock()
	r.tally = h.result
	s.mu.Unlock()
	go func() {
		defer stop()
		if deadline != nil {
			defer deadline.Stop()
		}
		r.execute(rctx, s, h, prog)
		// Off the live list before anyone waiting on Done looks at the run again.
		s.mu.Lock()
		delete(s.live, id)
		s.mu.Unlock()
		close(r.done)
	}()
	return r
}

func (r *Run) execute(ctx context.Context, s *Service, h *host, prog *lua.Program) {
	defer r.cancel(nil)
	start := s.opts.Now()
	pollDone := make(chan struct{})
	go r.pollCancel(ctx, s, pollDone)
	r.bus.emit(event.New(event.RunStarted, map[string]any{"workflow": r.spec.Path, "args": r.spec.Args,
		"resumed": r.Attempt > 1, "attempt": r.Attempt}))
	out, err := lua.Run(ctx, lua.Config{
		Host: h, Limits: r.spec.Limits, RunID: r.ID, Resumed: r.Attempt > 1, Attempt: r.Attempt,
		Concurrency: r.spec.Concurrency, Args: r.spec.Args, Now: s.opts.Now,
		Rand: rand.Float64, UUID: func() string { return uuid.Must(uuid.NewV7()).String() },
	}, prog)
	h.stopTimer()
	status, runErr := classify(err, ctx)
	runErr = capError(runErr)
	// The VM is done; calls it abandoned were cancelled with it. Wait for them so their
	// agent_done events come before run_done and count in the totals.
	r.cancel(ErrCancelled)
	close(pollDone)
	h.calls.Wait()
	h.live.close() // the end's row below holds the final totals
	res := h.result()
	res.RunID, res.Attempt = r.ID, r.Attempt
	res.Elapsed = s.opts.Now().Sub(start)
	res.Status, res.Err = status, runErr
	if res.Status == StatusCompleted {
		res.Report, res.HasReport = out.Report, out.HasReport
	}
	if res.Status == StatusSuspended {
		res.ResumeAfter = resumeAfter(res.Err)
		if res.ResumeAfter.IsZero() {
			res.ResumeAfter = s.opts.Now() // a used-up time budget: resumable at once
		}
		d := map[string]any{"reason": res.Err.Error(), "resume_after": res.ResumeAfter.UTC().Format(time.RFC3339Nano)}
		r.bus.emit(event.New(event.RunSuspended, d))
	}
	done := map[string]any{
		"status": string(res.Status), "report": res.Report, "tokens": res.Usage.Total(),
		"usage": res.Usage, "cost": res.Cost, "elapsed_ms": res.Elapsed.Milliseconds(),
		"agents": res.Agents, "attempt": r.Attempt,
	}
	if res.Err != nil {
		done["error"] = res.Err.Error()
	}
	if err := r.bus.flush(); err != nil && res.Err == nil {
		res.Status, res.Err = unrecorded(fmt.Errorf("record events: %w", err))
		done["status"], done["error"] = string(res.Status), res.Err.Error()
	}
	// run_done is stored before the run's row says it ended, so a reader in another
	// process that sees the run finished finds every event of it.
	r.bus.emit(event.New(event.RunDone, done))
	if err := r.bus.flush(); err != nil && res.Err == nil {
		res.Status, res.Err = unrecorded(fmt.Errorf("record events: %w", err))
	}
	if err := s.finishRow(res); err != nil && res.Err == nil {
		res.Status, res.Err = unrecorded(err)
	}
	r.result = res
	r.bus.close()
}

func (s *Service) finishRow(res Result) error {
	status, msg := string(res.Status), ""
	if res.Err != nil {
		msg = res.Err.Error()
	}
	u := storage.Usage(res.Usage)
	now := s.opts.Now()
	up := storage.RunUpdate{Status: &status, Error: &msg, Usage: &u, Cost: &res.Cost, Agents: &res.Agents, FinishedAt: &now}
	if !res.ResumeAfter.IsZero() {
		up.ResumeAfter = &res.ResumeAfter
	}
	if res.HasReport {
		b, err := json.Marshal(res.Report)
		if err == nil {
			raw := json.RawMessage(b)
			up.Report = &raw
		}
	}
	if err := s.opts.Store.UpdateRun(context.Background(), res.RunID, up); err != nil {
		return fmt.Errorf("record the end of run %s: %w", res.RunID, err)
	}
	return nil
}

// pollCancel turns a cancel request stored by another process into a cancel of this run.
func (r *Run) pollCancel(ctx context.Context, s *Service, done <-chan struct{}) {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-done:
			stop()
		case <-pctx.Done():
		}
	}()
	for sleepOn(pctx, s.opts.Clock, s.opts.CancelPoll) {
		if yes, err := s.opts.Store.CancelRequested(context.Background(), r.ID); err == nil && yes {
			r.Cancel()
			return
		}
	}
}

// unrecorded is the outcome of a run whose end could not be stored: suspended when the
// state dir could not be written (the journal holds every finished call, so a resume once
// there is space again completes the record), failed otherwise.
func unrecorded(err error) (Status, error) {
	if errors.Is(err, storage.ErrUnwritable) {
		return StatusSuspended, err
	}
	return StatusFailed, err
}

// classify maps how the VM ended to a run status. A run stopped because the state dir
// failed ends as that failure whatever the script did meanwhile: suspended when the disk
// could not be written (resumable as it is once there is space), failed when the database
// is corrupt.
func classify(err error, ctx context.Context) (Status, error) {
	if cause := context.Cause(ctx); storage.Broken(cause) {
		if errors.Is(cause, storage.ErrUnwritable) {
			return StatusSuspended, cause
		}
		return StatusFailed, cause
	}
	// A budget that a running turn found exceeded ends the run, even when the script
	// finished before it noticed the cancel.
	if se := (*lua.ScriptError)(nil); ctx.Err() != nil && errors.As(context.Cause(ctx), &se) {
		// The VM's own copy names the script line where the run stopped: keep it.
		if at := (*lua.ScriptError)(nil); errors.As(err, &at) && at.Msg == se.Msg && at.Where != "" {
			return StatusFailed, at
		}
		return StatusFailed, se
	}
	if err == nil {
		return StatusCompleted, nil
	}
	if lua.ErrorKindOf(err) == lua.KindCancelled || (ctx.Err() != nil && lua.ErrorKindOf(err) == "") {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrTimeBudget):
			return StatusSuspended, ErrTimeBudget
		case errors.Is(cause, ErrSuspended), errors.Is(cause, ErrShutdown):
			return StatusSuspended, cause
		case errors.Is(cause, ErrTimeout):
			if errors.Is(err, ErrTimeout) {
				return StatusFailed, err // the VM's error names the line the script was at
			}
			return StatusFailed, cause
		case errors.Is(cause, ErrCancelled) || errors.Is(cause, context.Canceled):
			return StatusCancelled, ErrCancelled
		}
	}
	return StatusFailed, err
}

// resumeAfter is the resume time a suspended run's error names; zero when none.
func resumeAfter(err error) time.Time {
	var se *scheduler.SuspendError
	if errors.As(err, &se) {
		return se.Until
	}
	return time.Time{}
}

func defaultBackoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << min(attempt-2, 6)
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	// Full jitter keeps many failing calls from retrying in lockstep.
	return time.Duration(float64(d) * (0.5 + 0.5*rand.Float64()))
}

// sameSettings checks start settings given again on a resume against those the run was
// started with (ResumeSpec.Repeated): the same value is no change; any other is refused,
// naming the run's value.
func sameSettings(started Spec, given map[string]string) error {
	names := make([]string, 0, len(given))
	for name := range given {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := given[name]
		var own string
		same := false
		switch name {
		case "backend":
			own, same = started.Backend, v == started.Backend
		case "model":
			own, same = started.Model, v == started.Model
		case "class":
			c := started.Class
			if c == "" {
				c = agent.ClassInteractive
			}
			own, same = string(c), v == string(c)
		case "timeout":
			own = started.Timeout.String()
			d, err := time.ParseDuration(v)
			same = err == nil && d == started.Timeout
		case "workflow":
			own, same = started.Path, samePath(v, started.Path)
		case "args":
			b, _ := json.Marshal(started.Args)
			own, same = string(b), sameJSON(v, started.Args)
		case "max-agent-calls":
			own = strconv.Itoa(started.Limits.MaxAgentCalls)
			n, err := strconv.Atoi(v)
			same = err == nil && n == started.Limits.MaxAgentCalls
		default:
			return fmt.Errorf("--%s is not a start setting a resume can check", name)
		}
		if same {
			continue
		}
		if own == "" {
			return fmt.Errorf("--%s %s: the run was started without --%s: %w (drop --%s)", name, v, name, ErrSettingChanged, name)
		}
		return fmt.Errorf("--%s %s differs from the run's %s: %w (drop --%s, or give --%s %s)", name, v, own, ErrSettingChanged, name, name, own)
	}
	return nil
}

// samePath reports whether two workflow paths name the same file, as this process reads
// them.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// sameJSON reports whether the JSON text given holds the same value as v.
func sameJSON(given string, v any) bool {
	var g any
	if err := json.Unmarshal([]byte(given), &g); err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var w any
	if err := json.Unmarshal(b, &w); err != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}
