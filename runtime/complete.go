package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Complete runs one model request outside any run — the planner's call — through the same
// scheduler as the runs' calls: every turn is admitted on the request's lane (its backend
// and model) in the request's class (interactive when unset), so a plan waits its turn
// behind, and is counted against, the same slots and rate limits, and is sent to the
// replica or fallback the scheduler placed it on. key names the call in
// the scheduler's view ("plan/1").
func (s *Service) Complete(ctx context.Context, key string, req agent.Request) (agent.Result, error) {
	b, err := s.opts.Backends.Get(req.Backend)
	if err != nil {
		return agent.Result{}, fmt.Errorf("%s: backend: %w", key, err)
	}
	req.Backend = b.ID()
	if req.Class == "" {
		req.Class = agent.ClassInteractive
	}
	lane := laneOf(req, b)
	start := s.opts.Now()
	turns := 0
	admit := func(tctx context.Context, cost adapters.TurnCost, send func(context.Context) adapters.TurnReport) error {
		turns++
		permit, err := s.opts.Scheduler.Admit(tctx, scheduler.Turn{
			RunID: key, CallKey: key, Lane: lane, Class: req.Class, Caller: s.opts.Caller,
			EstTokens: cost.Input + cost.MaxOutput, EstOutput: cost.MaxOutput, Continuation: turns > 1, RunStart: start,
		})
		if err != nil {
			return err
		}
		return s.sendTurn(tctx, req, lane, permit, send, nil, nil)
	}
	res, err := b.Run(ctx, req, adapters.Call{Turn: admit, Key: key})
	if err == nil && res.Status == "" {
		res.Status = agent.StatusOK
	}
	return res, err
}

// JournalPlan records the planner's calls in run id's journal (kind "plan", keyed by
// their plan/N or fix/N key), so the run's history shows what the model was asked, what
// it answered and why a script was rejected. Lua calls never use these keys, so a resume
// does not replay or diverge on them.
func (s *Service) JournalPlan(ctx context.Context, id string, calls []PlanCall) error {
	for _, c := range calls {
		result, err := json.Marshal(map[string]string{"reply": c.Reply, "reason": c.Reason})
		if err != nil {
			return fmt.Errorf("run %s: journal %s: %w", id, c.Key, err)
		}
		if _, err := s.opts.Store.JournalFinish(ctx, storage.Entry{RunID: id, CallKey: c.Key, Kind: "plan",
			InputHash: sha([]byte(c.Prompt)), Status: storage.EntryCompleted, Result: result,
			Usage: storage.Usage(c.Usage), Cost: c.Cost, Attempts: 1}); err != nil {
			return fmt.Errorf("run %s: journal %s: %w", id, c.Key, err)
		}
	}
	return nil
}

// Script returns the main workflow run id runs now, as pinned (a resume that ran a changed
// or fixed script pinned that one).
func (s *Service) Script(ctx context.Context, id string) ([]byte, error) {
	row, err := s.opts.Store.GetRun(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	var spec Spec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		return nil, fmt.Errorf("run %s: its stored spec is unreadable: %w", id, err)
	}
	files, err := s.opts.Store.Files(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	for _, f := range files {
		if f.Path == spec.Path {
			return f.Content, nil
		}
	}
	return nil, fmt.Errorf("run %s: its script %s was never pinned", id, spec.Path)
}

// FailedPlan records a run whose planning found no valid workflow (spec.Plan holds the
// task and the planner's calls): a failed run with planErr as its error, the calls
// journaled (kind "plan") and their tokens and cost as its own, so list, status and logs
// show what planning tried and what it cost. It has no script, so it does not resume.
func (s *Service) FailedPlan(ctx context.Context, spec Spec, planErr error) (Result, error) {
	if spec.Plan == nil {
		return Result{}, errors.New("record a failed plan: the spec has no plan")
	}
	spec.PlanFailed = true
	if spec.Class == "" {
		spec.Class = agent.ClassInteractive
	}
	id := uuid.Must(uuid.NewV7()).String()
	var usage agent.Usage
	var cost float64
	for _, c := range spec.Plan.Calls {
		usage, cost = usage.Add(c.Usage), cost+c.Cost
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return Result{}, fmt.Errorf("record a failed plan: encode its spec: %w", err)
	}
	argsJSON, _ := json.Marshal(spec.Args)
	start := s.opts.Now()
	if err := s.opts.Store.CreateRun(ctx, storage.Run{ID: id, Workflow: "plan: " + spec.Plan.Task, Status: storage.StatusRunning,
		Args: argsJSON, Attempt: 1, PID: s.opts.PID, Spec: specJSON}); err != nil {
		return Result{}, fmt.Errorf("record a failed plan: %w", err)
	}
	if err := s.JournalPlan(ctx, id, spec.Plan.Calls); err != nil {
		return Result{}, err
	}
	res := Result{RunID: id, Status: StatusFailed, Err: planErr, Usage: usage, Cost: cost, Attempt: 1}
	now := s.opts.Now()
	if _, err := s.opts.Store.Append(ctx, id,
		event.Event{Type: event.RunStarted, TS: start, Data: map[string]any{"workflow": "plan: " + spec.Plan.Task, "args": spec.Args, "resumed": false, "attempt": 1}},
		event.Event{Type: event.RunDone, TS: now, Data: map[string]any{"status": string(StatusFailed), "error": planErr.Error(),
			"tokens": usage.Total(), "usage": usage, "cost": cost, "elapsed_ms": int64(0), "agents": Counts{}, "attempt": 1,
			"plan_attempts": len(spec.Plan.Calls)}}); err != nil {
		return Result{}, fmt.Errorf("record a failed plan: run %s: %w", id, err)
	}
	if err := s.finishRow(s.opts.Store, res); err != nil {
		return Result{}, err
	}
	return res, nil
}
