package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// RunInfo is what status shows of one run.
type RunInfo struct {
	storage.Run
	Phases []storage.Phase
	// Live is true when this process drives the run. A run stored as running whose
	// process is gone is Stale, and its Status is shown as interrupted.
	Live  bool
	Stale bool
	// Pending are the run's tool calls waiting for a person's answer (Approve); while
	// the run is driven and has any, its Status is awaiting_approval.
	Pending []Approval
}

// StatusInterrupted is the status shown for a run stored as running whose process is gone
// (SPEC §4: it resumes). Status and List show it; the store keeps running.
const StatusInterrupted Status = storage.StatusInterrupted

// StatusIdle is how Status and List show a running run whose turns come from a client
// that keeps its own loop (a proxy conversation) while no turn of it is in flight: it
// stays open for the client's next turn until it ends (DELETE, idle timeout). Its driver
// says so in the run's spec as "idle": true; the store keeps running.
const StatusIdle Status = "idle"

// shown returns r as users are shown it: interrupted instead of running when no live
// process drives it, idle when its driver says no turn of it is in flight.
func (s *Service) shown(ctx context.Context, r storage.Run) storage.Run {
	if r.Status == storage.StatusRunning && !s.driven(r) {
		// It may have ended between the read and the check: a run's row says so before
		// it leaves the live list, so a second read tells.
		if fresh, err := s.opts.Store.GetRun(ctx, r.ID); err == nil && fresh.Status != storage.StatusRunning {
			return fresh
		}
		r.Status = storage.StatusInterrupted
	}
	if r.Status == storage.StatusRunning && specIdle(r.Spec) {
		r.Status = string(StatusIdle)
	}
	return r
}

// specIdle reports whether a run's spec says it is idle between turns.
func specIdle(spec json.RawMessage) bool {
	if !bytes.Contains(spec, []byte(`"idle"`)) {
		return false // a workflow's spec: no decoding
	}
	var sp struct {
		Idle bool `json:"idle"`
	}
	return json.Unmarshal(spec, &sp) == nil && sp.Idle
}

// current puts the live totals of a run this process drives on r: its row has them too,
// written as calls finish, but a moment later.
func (s *Service) current(r storage.Run) storage.Run {
	if r.Status != storage.StatusRunning {
		return r
	}
	s.mu.Lock()
	live := s.live[r.ID]
	var tally func() Result
	if live != nil {
		tally = live.tally
	}
	s.mu.Unlock()
	if tally != nil {
		t := tally()
		r.Usage, r.Cost, r.Agents = storage.Usage(t.Usage), t.Cost, t.Agents
	}
	return r
}

// Resolve finds a run by id or unique id prefix.
func (s *Service) Resolve(ctx context.Context, idOrPrefix string) (storage.Run, error) {
	r, err := s.opts.Store.ResolveRun(ctx, idOrPrefix)
	if errors.Is(err, storage.ErrAmbiguousRun) {
		return storage.Run{}, err // it names the prefix and the candidates
	}
	if err != nil {
		return storage.Run{}, fmt.Errorf("run %s: %w", idOrPrefix, err)
	}
	return r, nil
}

// Status returns one run with its phases.
func (s *Service) Status(ctx context.Context, idOrPrefix string) (RunInfo, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return RunInfo{}, err
	}
	phases, err := s.opts.Store.Phases(ctx, r.ID)
	if err != nil {
		return RunInfo{}, fmt.Errorf("run %s: phases: %w", r.ID, err)
	}
	info := RunInfo{Run: s.current(s.shown(ctx, r)), Phases: phases}
	s.mu.Lock()
	_, info.Live = s.live[r.ID]
	s.mu.Unlock()
	info.Stale = info.Status == storage.StatusInterrupted
	if r.Status == storage.StatusCompleted {
		return info, nil
	}
	if info.Pending, err = s.opts.Store.Approvals(ctx, storage.ApprovalFilter{RunID: r.ID, Pending: true}); err != nil {
		return RunInfo{}, fmt.Errorf("run %s: approvals: %w", r.ID, err)
	}
	if len(info.Pending) > 0 && info.Status == storage.StatusRunning {
		info.Status = string(StatusAwaitingApproval)
	}
	return info, nil
}

// List returns runs, newest first, as Status shows them: a run whose process is gone is
// interrupted, and opts.Status may ask for interrupted runs (or for running ones, which
// then leaves them out).
func (s *Service) List(ctx context.Context, opts storage.ListOptions) ([]storage.Run, error) {
	want, limit := opts.Status, opts.Limit
	if want == storage.StatusInterrupted || Running(want) {
		// Both are stored as running: read them all, then keep the asked-for ones.
		opts.Status, opts.Limit = storage.StatusRunning, 0
	}
	runs, err := s.opts.Store.ListRuns(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range runs {
		runs[i] = s.current(s.shown(ctx, runs[i]))
	}
	if err := s.awaiting(ctx, runs); err != nil {
		return nil, err
	}
	out := runs[:0]
	for _, r := range runs {
		if want == "" || r.Status == want {
			out = append(out, r)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Cancel stops a run: at once when this process drives it, otherwise by a request the
// driving process picks up at once (a store that notifies) or within Options.CancelPoll.
// A run whose node's lease lapsed gets the request too, not a record of its end: its
// node may be only stopped and wake, and whichever node claims the run cancels it.
func (s *Service) Cancel(ctx context.Context, idOrPrefix string) (storage.Run, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return r, err
	}
	if r.Status != storage.StatusRunning {
		return r, fmt.Errorf("run %s: cannot cancel: it is already %s", short(r.ID), r.Status)
	}
	s.mu.Lock()
	live := s.live[r.ID]
	s.mu.Unlock()
	if live != nil {
		live.Cancel()
		return r, nil
	}
	if r.PID != 0 && !s.driven(r) && s.gone(r) {
		// Nobody drives it: record it as cancelled so it shows the truth and resumes (unless
		// a node claims it meanwhile: then the request below reaches that node).
		st, msg := storage.StatusCancelled, "cancelled after its process had gone"
		err := s.opts.Store.UpdateRun(ctx, r.ID, storage.RunUpdate{Status: &st, Error: &msg, IfAttempt: &r.Attempt})
		if errors.Is(err, storage.ErrRunChanged) {
			err = s.opts.Store.RequestCancel(ctx, r.ID)
		}
		if err != nil {
			return r, fmt.Errorf("run %s: cancel: %w", r.ID, err)
		}
		return r, nil
	}
	if err := s.opts.Store.RequestCancel(ctx, r.ID); err != nil {
		return r, fmt.Errorf("run %s: cancel: %w", r.ID, err)
	}
	return r, nil
}

// EventsOptions select a run's events.
type EventsOptions struct {
	Since  int64    // only events with seq > Since
	Types  []string // only these types; empty = all
	Follow bool     // keep streaming until the run ends
	// Attempt n > 1 starts the stream at that attempt's run_started (a viewer of a
	// resumed run does not see the earlier attempt's end); 0 or 1 = from the start.
	Attempt int
	Poll    time.Duration
}

// Events streams a run's events in order. Without Follow it ends after the last stored
// event; with Follow it ends after run_done, or when the run's process is gone. Reading
// errors end the stream and are reported on the error channel.
func (s *Service) Events(ctx context.Context, idOrPrefix string, o EventsOptions) (<-chan event.Event, <-chan error, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return nil, nil, err
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Attempt > 1 {
		start, err := s.attemptStart(ctx, r, o)
		if err != nil {
			return nil, nil, err
		}
		o.Since = max(o.Since, start)
	}
	out := make(chan event.Event, 256)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		defer close(errc)
		cursor := o.Since
		for {
			// Read the status before the events: a run's row is updated only after its
			// run_done is stored, so once a run is seen finished one more read gets
			// everything it wrote.
			over := !o.Follow || !s.running(ctx, r.ID)
			for {
				evs, err := s.opts.Store.EventsOfType(ctx, r.ID, cursor, 1024, o.Types)
				if err != nil {
					errc <- err
					return
				}
				for _, ev := range evs {
					cursor = ev.Seq
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
				if len(evs) < 1024 {
					break
				}
			}
			if over || !sleepOn(ctx, s.opts.Clock, o.Poll) {
				return
			}
		}
	}()
	return out, errc, nil
}

// running reports whether a process, this one or another, still drives the run.
// attemptStart is the seq just before attempt o.Attempt's run_started. A follower may ask
// for an attempt its run's row names before that event is stored (a resume another
// process, the daemon, has just begun): it waits for it while the run goes on.
func (s *Service) attemptStart(ctx context.Context, r storage.Run, o EventsOptions) (int64, error) {
	for {
		starts, err := s.opts.Store.EventsOfType(ctx, r.ID, 0, 0, []string{event.RunStarted})
		if err != nil {
			return 0, err
		}
		for _, ev := range starts {
			if AttemptOf(ev) == o.Attempt {
				return ev.Seq - 1, nil
			}
		}
		if !o.Follow || o.Attempt > r.Attempt+1 || !s.running(ctx, r.ID) {
			return 0, fmt.Errorf("run %s has no attempt %d (its latest is %d)", r.ID, o.Attempt, r.Attempt)
		}
		if !sleepOn(ctx, s.opts.Clock, o.Poll) {
			return 0, ctx.Err()
		}
	}
}

func (s *Service) running(ctx context.Context, id string) bool {
	info, err := s.Status(ctx, id)
	return err == nil && Running(info.Status)
}

// Wait blocks until the run is no longer running and returns its final row.
func (s *Service) Wait(ctx context.Context, idOrPrefix string) (storage.Run, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return r, err
	}
	s.mu.Lock()
	live := s.live[r.ID]
	s.mu.Unlock()
	if live != nil {
		select {
		case <-live.Done():
		case <-ctx.Done():
			return r, ctx.Err()
		}
		return s.opts.Store.GetRun(ctx, r.ID)
	}
	for {
		info, err := s.Status(ctx, r.ID)
		if err != nil {
			return r, err
		}
		if !Running(info.Status) {
			return info.Run, nil
		}
		if !sleepOn(ctx, s.opts.Clock, 200*time.Millisecond) {
			return info.Run, ctx.Err()
		}
	}
}

// SchedulerStats returns the admission scheduler's counters — per lane: turns queued by
// class, running, waits, 429s, retries, suspensions, the budgets left — when the
// scheduler keeps them (the Executor does); ok is false otherwise. The scheduler is the
// process's, so these cover every run this Service drives.
func (s *Service) SchedulerStats() (stats scheduler.ExecutorStats, ok bool) {
	st, ok := s.opts.Scheduler.(interface {
		Stats() scheduler.ExecutorStats
	})
	if !ok {
		return scheduler.ExecutorStats{}, false
	}
	return st.Stats(), true
}

// AttemptOf is the attempt number a run_started event carries (0 for other events).
func AttemptOf(ev event.Event) int {
	switch v := ev.Data["attempt"].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}
