package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// StatusAwaitingApproval is how Status and List show a running run that has a tool call
// parked for a person's answer (Service.Approve). The store keeps it running.
const StatusAwaitingApproval Status = "awaiting_approval"

// Approval is a destructive tool call that waits, or waited, for a person's answer.
type Approval = storage.Approval

// maxApprovalID bounds an approval id a caller gives (luft's have 19 characters).
const maxApprovalID = 64

// maxApprovalEventArgs bounds the arguments an approval_requested event shows.
const maxApprovalEventArgs = 4 << 10

// askApproval parks a tool call that needs a person's yes (adapters.ToolCall.Ask) until
// Approve answers it, and returns the answer. The question is journaled first and found
// again, like the tool call itself, by conversation and turn and the tool call's id (or
// its tool and arguments), so an answered one is never asked again and one left
// unanswered when the process stopped is asked again when the resumed call gets here.
// The call holds no scheduler slot while it waits: tools run between admitted turns.
func (h *host) askApproval(ctx context.Context, c lua.Call, rec storage.ToolCall, tc adapters.ToolCall, hold func() (resume func())) (bool, error) {
	known, err := h.store().Approvals(ctx, storage.ApprovalFilter{RunID: h.run.ID, CallKey: c.Key})
	if err != nil {
		return false, h.stopIfBroken(fmt.Errorf("approval of tool call %s of %s: %w", tc.Name, c.Key, err))
	}
	a, found := matchApproval(known, rec)
	if !found {
		a = storage.Approval{RunID: h.run.ID, ID: approvalID(rec), CallKey: c.Key, Conversation: rec.Conversation,
			Turn: rec.Turn, ToolCallID: rec.ID, Tool: tc.Name, Arguments: tc.Arguments, ArgsHash: rec.ArgsHash}
	}
	// Listen before the row is read, so an answer given in between is not missed.
	answer, stop := h.e.listenApproval(h.run.ID, a.ID)
	defer stop()
	if !found {
		if a, err = h.store().AskApproval(ctx, a); err != nil {
			return false, h.stopIfBroken(fmt.Errorf("approval of tool call %s of %s: %w", tc.Name, c.Key, err))
		}
	}
	if a.Status != storage.ApprovalPending {
		return a.Allowed(), nil
	}
	// The person's time to answer is not the agent's working time (timeout_ms) nor its
	// latency (agent_done's run_ms): the clock stops before the question is out.
	defer hold()()
	h.emit(event.ApprovalRequested, map[string]any{"approval_id": a.ID, "call_key": c.Key, "tool": a.Tool,
		"arguments": clip(a.Arguments, maxApprovalEventArgs)})
	for {
		fired := make(chan struct{})
		poll := h.e.opts.Clock.AfterFunc(h.e.pollEvery(), func() { close(fired) })
		select {
		case a = <-answer:
			poll.Stop()
		case <-fired:
			// Answered by another process (the daemon's API while a CLI drives the run, a
			// node whose notice did not arrive).
			rows, err := h.store().Approvals(ctx, storage.ApprovalFilter{RunID: h.run.ID, CallKey: c.Key})
			if storage.Broken(err) {
				// No answer could be recorded either: stop rather than wait for one.
				return false, h.stopIfBroken(fmt.Errorf("approval of tool call %s of %s: %w", tc.Name, c.Key, err))
			}
			if err != nil {
				continue // a passing failure (the run's end cancels ctx): poll again
			}
			for _, r := range rows {
				if r.ID == a.ID {
					a = r
				}
			}
		case <-ctx.Done():
			poll.Stop()
			return false, context.Cause(ctx)
		}
		if a.Status != storage.ApprovalPending {
			h.emit(event.ApprovalDecided, map[string]any{"approval_id": a.ID, "call_key": c.Key, "tool": a.Tool,
				"allow": a.Allowed()})
			return a.Allowed(), nil
		}
	}
}

// matchApproval finds the approval asked for the tool call want repeats, as matchTool
// finds the call itself: by its id, else by its tool and arguments in the same
// conversation and turn (a model asked again may draw a fresh id).
func matchApproval(known []storage.Approval, want storage.ToolCall) (storage.Approval, bool) {
	return matchCall(known, want, func(a storage.Approval) storage.ToolCall {
		return storage.ToolCall{Conversation: a.Conversation, Turn: a.Turn, ID: a.ToolCallID, Name: a.Tool, ArgsHash: a.ArgsHash}
	})
}

// approvalID names the approval of one tool call: the same after a restart.
func approvalID(rec storage.ToolCall) string {
	return "ap-" + sha([]byte(strings.Join([]string{rec.RunID, rec.CallKey, rec.Conversation,
		fmt.Sprint(rec.Turn), rec.ID, rec.Name}, "\x00")))[:16]
}

// listenApproval registers for the answer to one approval; stop unregisters.
func (s *Service) listenApproval(runID, id string) (<-chan storage.Approval, func()) {
	ch := make(chan storage.Approval, 1)
	key := runID + "/" + id
	s.mu.Lock()
	if s.approvals == nil {
		s.approvals = map[string][]chan storage.Approval{}
	}
	s.approvals[key] = append(s.approvals[key], ch)
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.approvals[key]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.approvals, key)
		} else {
			s.approvals[key] = list
		}
	}
}

// Errors of Approve that callers test for.
var (
	ErrNoApproval = errors.New("no pending approval")
	// ErrApprovalAmbiguous means Approve was given no approval id and the run has
	// several pending approvals.
	ErrApprovalAmbiguous = errors.New("several pending approvals")
)

// Approve answers a pending approval of a run: allow runs the parked tool call, !allow
// gives the agent tools.DeclinedText and it goes on. approvalID "" answers the run's only
// pending approval. The answer is journaled before the run is told, so it holds across a
// restart; a run driven by another process picks it up at once on a store that notifies
// (PostgreSQL), else within Options.CancelPoll, and a
// run that is not driven now finds it when it is resumed.
func (s *Service) Approve(ctx context.Context, idOrPrefix, approvalID string, allow bool) (Approval, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return Approval{}, err
	}
	if len(approvalID) > maxApprovalID {
		return Approval{}, fmt.Errorf("run %s: approve: %w: an approval id has 19 characters, not %d (the run's pending_approvals list them)",
			r.ID, ErrNoApproval, len(approvalID))
	}
	pending, err := s.opts.Store.Approvals(ctx, storage.ApprovalFilter{RunID: r.ID, Pending: true})
	if err != nil {
		return Approval{}, fmt.Errorf("run %s: approve: %w", r.ID, err)
	}
	if approvalID == "" {
		switch len(pending) {
		case 0:
			return Approval{}, fmt.Errorf("run %s: approve: %w: the run waits for no tool call's approval (it is %s)", r.ID, ErrNoApproval, r.Status)
		case 1:
			approvalID = pending[0].ID
		default:
			ids := make([]string, len(pending))
			for i, p := range pending {
				ids[i] = p.ID + " (" + p.Tool + ")"
			}
			return Approval{}, fmt.Errorf("run %s: approve: %w: %s; name one with its approval id", r.ID, ErrApprovalAmbiguous, strings.Join(ids, ", "))
		}
	}
	a, err := s.opts.Store.DecideApproval(ctx, r.ID, approvalID, allow)
	switch {
	case errors.Is(err, storage.ErrApprovalNotFound):
		ids := make([]string, len(pending))
		for i, p := range pending {
			ids[i] = p.ID
		}
		list := "none"
		if len(ids) > 0 {
			list = strings.Join(ids, ", ")
		}
		return Approval{}, fmt.Errorf("run %s: approve: %w: the run has no approval %q (pending: %s)", r.ID, ErrNoApproval, approvalID, list)
	case err != nil:
		return a, fmt.Errorf("run %s: approve %s: %w", r.ID, approvalID, err)
	}
	s.answered(a)
	return a, nil
}

// Approvals returns a run's approvals, answered and pending, oldest first.
func (s *Service) Approvals(ctx context.Context, idOrPrefix string) ([]Approval, error) {
	r, err := s.Resolve(ctx, idOrPrefix)
	if err != nil {
		return nil, err
	}
	return s.opts.Store.Approvals(ctx, storage.ApprovalFilter{RunID: r.ID})
}

// awaiting marks, in place, the runs of rs that run and wait for an approval.
func (s *Service) awaiting(ctx context.Context, rs []storage.Run) error {
	if !slices.ContainsFunc(rs, func(r storage.Run) bool { return r.Status == storage.StatusRunning }) {
		return nil
	}
	pending, err := s.opts.Store.Approvals(ctx, storage.ApprovalFilter{Pending: true})
	if err != nil {
		return err
	}
	waiting := map[string]bool{}
	for _, a := range pending {
		waiting[a.RunID] = true
	}
	for i := range rs {
		if rs[i].Status == storage.StatusRunning && waiting[rs[i].ID] {
			rs[i].Status = string(StatusAwaitingApproval)
		}
	}
	return nil
}

// Running reports whether a run's shown status is one of a run in progress: running,
// running and waiting for an approval, or idle (a proxy conversation between turns).
func Running(status string) bool {
	return status == storage.StatusRunning || status == string(StatusAwaitingApproval) || status == string(StatusIdle)
}
