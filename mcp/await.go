package mcp

import (
	"context"
	"fmt"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/mcp"
)

type awaitArgs struct {
	RunID    string   `json:"run_id"`
	TimeoutS *float64 `json:"timeout_s"`
}

// notLivePoll is how often an await looks again at a run this process does not drive
// (another process drives it, or the daemon has yet to resume it after a restart).
const notLivePoll = 100 * time.Millisecond

func (s *Server) await(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a awaitArgs
	if err := bind(req, &a); err != nil {
		return ToolError("%v", err), nil
	}
	wait := defaultAwait
	if a.TimeoutS != nil {
		if *a.TimeoutS < 0 || *a.TimeoutS > 3600 {
			return ToolError("workflow_await: timeout_s %g: use 0 to 3600 seconds", *a.TimeoutS), nil
		}
		wait = time.Duration(*a.TimeoutS * float64(time.Second))
	}
	wait = min(wait, s.opts.MaxAwait)
	info, bad := s.runRef(ctx, "workflow_await", a.RunID)
	if bad != nil {
		return bad, nil
	}
	info, err := s.AwaitRun(ctx, info.ID, wait, func(info runtime.RunInfo, n int) {
		s.Progress(ctx, req, float64(n), 0, progressText(info))
	})
	if err != nil {
		return ToolError("workflow_await: run %s: %v", a.RunID, err), nil
	}
	v := runView(info.Run, info.Phases, true)
	text := runText(v)
	switch info.Status {
	case storage.StatusRunning:
		text += fmt.Sprintf("\nstill running after %s: call workflow_await again", wait)
	case storage.StatusInterrupted:
		text += "\nthe process driving it is gone: it resumes when the luft daemon starts again (or with luft run --resume)"
	case storage.StatusSuspended:
		if info.ResumeAfter.IsZero() {
			text += "\nsuspended (its host stopped): it resumes when the luft daemon starts again (or with luft run --resume); call workflow_await again then"
		} else {
			text += fmt.Sprintf("\nsuspended until %s: the daemon resumes it then; call workflow_await again", info.ResumeAfter.UTC().Format(time.RFC3339))
		}
	}
	v.Pending = approvalViews(info.Pending)
	text += approvalText(info.ID, info.Pending)
	return Result(v, text), nil
}

// progressText is a run's phase and agent counts for a progress notification.
func progressText(info runtime.RunInfo) string {
	s := fmt.Sprintf("%s: agents %s", info.Status, info.Agents)
	if n := len(info.Phases); n > 0 {
		p := info.Phases[n-1]
		s = fmt.Sprintf("phase %d %q (%s, %d/%d): %s", p.ID, p.Label, p.Status, p.OK+p.Failed+p.Cancelled, p.Planned, s)
	}
	return s
}

// AwaitRun waits until the run is no longer running or wait has passed, and returns its
// status then. It wakes on the run's events, not by polling, when this process drives
// the run; progress (may be nil) is called with the run's status (agent counts as of
// now) and a count that grows with every call, when the phase or agent counts change
// and at least every Options.ProgressEvery. Each event is shown to the hooks added with
// OnAwaitEvent.
func (s *Server) AwaitRun(ctx context.Context, id string, wait time.Duration, progress func(runtime.RunInfo, int)) (runtime.RunInfo, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	beat := time.NewTicker(s.opts.ProgressEvery)
	defer beat.Stop()
	calls := 0
	report := func(counts *storage.AgentCounts) error {
		if progress == nil {
			return nil
		}
		info, err := s.svc.Status(ctx, id)
		if err != nil || !runtime.Running(info.Status) {
			return err
		}
		if counts != nil {
			info.Agents = *counts
		} else if info, err = s.liveStatus(ctx, id); err != nil {
			return err
		}
		calls++
		progress(info, calls)
		return nil
	}
	for {
		info, err := s.svc.Status(ctx, id)
		if err != nil {
			return info, err
		}
		if !waitable(info, s.opts.Resumes) || asksClient(ctx, info.Status) {
			return info, nil
		}
		if run := s.live(id); run != nil {
			return s.awaitLive(ctx, run, deadline.C, beat.C, report)
		}
		// Not driven here: look again shortly, until it ends, is driven here or time is up.
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-deadline.C:
			return s.liveStatus(ctx, id)
		case <-beat.C:
			if err := report(nil); err != nil {
				return info, err
			}
		case <-time.After(notLivePoll):
		}
	}
}

// asksClient reports whether an await should return a run that waits for an approval
// so that its caller answers it with approve: the caller's client cannot be asked
// (elicitation) while the await goes on.
func asksClient(ctx context.Context, status string) bool {
	return status == string(runtime.StatusAwaitingApproval) && !CanElicit(ctx)
}

// waitable reports whether an await should go on waiting for a run.
func waitable(info runtime.RunInfo, resumes bool) bool {
	switch info.Status {
	case storage.StatusRunning, string(runtime.StatusAwaitingApproval):
		return true
	case storage.StatusInterrupted:
		return resumes // the host resumes it shortly
	}
	return false
}

func (s *Server) live(id string) *runtime.Run {
	for _, r := range s.svc.Live() {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// liveStatus is Status: a running run's counts, tokens and cost are live there.
func (s *Server) liveStatus(ctx context.Context, id string) (runtime.RunInfo, error) {
	return s.svc.Status(ctx, id)
}

// countAgent counts an agent_done event as the runtime counts the call.
func countAgent(c *storage.AgentCounts, ev event.Event) {
	switch {
	case ev.Data["cached"] == true:
		c.Cached++
	case ev.Data["status"] == "ok" && ev.Data["error"] == nil:
		c.OK++
	case ev.Data["status"] == string(agent.StatusCancelled):
		c.Cancelled++
	default:
		c.Failed++
	}
}

// awaitLive waits on a run this process drives: its event stream wakes the wait at once.
func (s *Server) awaitLive(ctx context.Context, run *runtime.Run, deadline, beat <-chan time.Time, report func(*storage.AgentCounts) error) (runtime.RunInfo, error) {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	evs := run.SubscribeAttempt(sctx)
	hooks := s.hooks()
	var counts storage.AgentCounts
	// Progress goes out when counts change, at most every progressGap, so a run of many
	// quick agents does not flood the client.
	const progressGap = 200 * time.Millisecond
	var last time.Time
	dirty := false
	var flush <-chan time.Time
	send := func() error {
		last, dirty = time.Now(), false
		c := counts
		return report(&c)
	}
	for {
		select {
		case <-run.Done():
			// Hooks see the run's last events too; without hooks the answer goes at once.
			// evs is nil once its stream has ended (often before Done): a range over it
			// would block for ever.
			if len(hooks) > 0 && evs != nil {
				for ev := range evs {
					for _, h := range hooks {
						h(ctx, run.ID, ev)
					}
				}
			}
			return s.svc.Status(ctx, run.ID)
		case <-ctx.Done():
			return s.svc.Status(context.WithoutCancel(ctx), run.ID)
		case <-deadline:
			info, err := s.svc.Status(ctx, run.ID)
			if err == nil && runtime.Running(info.Status) {
				info.Agents = counts
			}
			return info, err
		case <-beat:
			if err := send(); err != nil {
				return runtime.RunInfo{}, err
			}
		case <-flush:
			flush = nil
			if dirty {
				if err := send(); err != nil {
					return runtime.RunInfo{}, err
				}
			}
		case ev, ok := <-evs:
			if !ok {
				// The stream ends with the run; Done follows.
				evs = nil
				continue
			}
			for _, h := range hooks {
				h(ctx, run.ID, ev)
			}
			if ev.Type == event.ApprovalRequested && !CanElicit(ctx) {
				// The caller answers with approve: it gets the pending call now.
				if info, err := s.svc.Status(ctx, run.ID); err != nil || asksClient(ctx, info.Status) {
					return info, err
				}
			}
			switch ev.Type {
			case event.AgentDone:
				countAgent(&counts, ev)
			case event.PhaseStarted, event.PhaseDone:
			default:
				continue
			}
			dirty = true
			if wait := progressGap - time.Since(last); wait > 0 {
				if flush == nil {
					flush = time.After(wait)
				}
			} else if err := send(); err != nil {
				return runtime.RunInfo{}, err
			}
		}
	}
}
