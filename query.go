package luft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// RunInfo is what the state dir knows of one run.
type RunInfo struct {
	ID       string
	Workflow string // the script's path, or its name
	// Status is interrupted for a run stored as running whose process is gone.
	Status    Status
	Error     string // why it did not complete; "" when it did or is running
	Attempt   int
	Usage     Usage
	Cost      float64
	Agents    AgentCounts
	Report    any // as JSON decodes it; see HasReport
	HasReport bool
	CreatedAt time.Time
	// FinishedAt is when its latest attempt ended; zero while it runs.
	FinishedAt  time.Time
	ResumeAfter time.Time // when a suspended run can go on; zero otherwise
	// Live is true while this Engine drives the run.
	Live bool
	// PendingApprovals are the run's tool calls waiting for an answer (Engine.Approve);
	// while the run is driven and has any, Status is StatusAwaitingApproval. Status fills
	// it; List leaves it empty.
	PendingApprovals []Approval
}

// Status returns one run, by id or unique id prefix; a *NotFoundError when there is none.
func (e *Engine) Status(ctx context.Context, runID string) (RunInfo, error) {
	if err := e.use(ctx, "Status"); err != nil {
		return RunInfo{}, err
	}
	if runID == "" {
		return RunInfo{}, errors.New("luft: Status: the run id is empty; List shows the runs")
	}
	info, err := e.svc.Status(ctx, runID)
	if err != nil {
		return RunInfo{}, typed(err, runID)
	}
	out := infoOf(info.Run)
	out.Live = info.Live
	for _, a := range info.Pending {
		out.PendingApprovals = append(out.PendingApprovals, approvalOf(a))
	}
	return out, nil
}

// ListOptions select runs.
type ListOptions struct {
	Status Status // only runs in this status; "" = all
	Limit  int    // at most this many, newest first; 0 = all
}

// List returns runs, newest first.
func (e *Engine) List(ctx context.Context, o ListOptions) ([]RunInfo, error) {
	if err := e.use(ctx, "List"); err != nil {
		return nil, err
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("luft: List: Limit %d is negative (0 = all)", o.Limit)
	}
	switch o.Status {
	case "", StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusSuspended, StatusInterrupted, StatusAwaitingApproval, StatusIdle:
	default:
		return nil, fmt.Errorf("luft: List: %q is not a run status", o.Status)
	}
	runs, err := e.svc.List(ctx, storage.ListOptions{Status: string(o.Status), Limit: o.Limit})
	if err != nil {
		return nil, fmt.Errorf("luft: list runs: %w", err)
	}
	live := map[string]bool{}
	for _, r := range e.svc.Live() {
		live[r.ID] = true
	}
	out := make([]RunInfo, 0, len(runs))
	for _, r := range runs {
		info := infoOf(r)
		info.Live = live[r.ID]
		out = append(out, info)
	}
	return out, nil
}

// Events yields a run's stored events with Seq > since, in order, across all its
// attempts; it does not wait for more (a live run's Run.Events does). A run that does not
// exist yields a *NotFoundError; a failure to read the store ends the sequence with it.
func (e *Engine) Events(ctx context.Context, runID string, since int64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if err := e.use(ctx, "Events"); err != nil {
			yield(Event{}, err)
			return
		}
		if runID == "" {
			yield(Event{}, errors.New("luft: Events: the run id is empty; List shows the runs"))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		evs, errc, err := e.svc.Events(ctx, runID, runtime.EventsOptions{Since: since})
		if err != nil {
			yield(Event{}, typed(err, runID))
			return
		}
		for ev := range evs {
			if !yield(eventOf(ev), nil) {
				return
			}
		}
		if err := <-errc; err != nil {
			yield(Event{}, fmt.Errorf("luft: events of run %s: %w", runID, err))
		} else if ctx.Err() != nil {
			yield(Event{}, ctx.Err())
		}
	}
}

func infoOf(r storage.Run) RunInfo {
	out := RunInfo{ID: r.ID, Workflow: r.Workflow, Status: Status(r.Status), Error: r.Error, Attempt: r.Attempt,
		Usage: Usage(r.Usage), Cost: r.Cost, Agents: AgentCounts(r.Agents), CreatedAt: r.CreatedAt,
		FinishedAt: r.FinishedAt, ResumeAfter: r.ResumeAfter}
	if r.HasReport {
		var v any
		if json.Unmarshal(r.Report, &v) == nil {
			out.Report, out.HasReport = v, true
		}
	}
	return out
}
