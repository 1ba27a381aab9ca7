package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
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
	// store is the store as this attempt writes to it: fenced on the attempt.
	store storage.Store
	// workspace is the workspace the run has recorded it needs ("" = none yet).
	workspace runWorkspace
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

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait blocks until the run ends and returns its result.
func (r *Run) Wait() Result {
	<-r.done
	return r.result
}

func (s *Service) launch(ctx context.Context, id string, attempt int, workspace string, spec Spec, prog *lua.Program,
	journal map[string]storage.Entry, pinned map[string]storage.File, rs ResumeSpec) *Run {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var deadline scheduler.Timer
	if spec.Timeout > 0 {
		deadline = s.opts.Clock.AfterFunc(spec.Timeout, func() { cancel(fmt.Errorf("%w (%s)", ErrTimeout, spec.Timeout)) })
	}
	r := &Run{ID: id, Attempt: attempt, spec: spec, cancel: cancel, done: make(chan struct{}),
		store: fencedStore{Store: s.opts.Store, id: id, attempt: attempt}}
	r.workspace.name = workspace
	// A run that reaches an event limit ends with the limit as its error.
	r.bus = newBus(r.store, id, s.opts.Now, s.opts.Events, func(err error) { r.cancel(err) })
	// Events that cannot be stored stop the run as the journal's failures do.
	r.bus.fail = func(err error) {
		if storage.Broken(err) || ownershipLost(err) {
			cancel(err)
		}
	}
	s.mu.Lock()
	s.live[id] = r
	s.mu.Unlock()
	s.listenNotices()
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
	// A run taken over may carry a cancel given while it changed hands (claim keeps it):
	// it ends cancelled before its script starts anything.
	if r.Attempt > 1 {
		s.checkCancel(r)
	}
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
	if cause := context.Cause(ctx); ownershipLost(cause) {
		// Another node claimed the run (or may be claiming it): this attempt writes nothing
		// more, not even its end; the run is the claimer's.
		s.logf("run %s: attempt %d stopped, no longer this node's: %v", r.ID, r.Attempt, cause)
		res.Status, res.Err = StatusInterrupted, cause
		r.result = res
		r.bus.close()
		return
	}
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
	if err := s.finishRow(r.store, res); err != nil && res.Err == nil {
		res.Status, res.Err = unrecorded(err)
	}
	r.result = res
	r.bus.close()
}

func (s *Service) finishRow(st storage.Store, res Result) error {
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
	if err := st.UpdateRun(context.Background(), res.RunID, up); err != nil {
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
	for sleepOn(pctx, s.opts.Clock, s.pollEvery()) {
		if s.checkCancel(r) {
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
