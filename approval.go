package luft

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// Approval is a destructive tool call (write_file, edit_file, an MCP tool marked
// destructiveHint, a command allow_commands does not name) that waits, or waited, for a
// person's answer under [tools] approval = "ask".
type Approval struct {
	ID      string // "ap-…": what Engine.Approve takes
	RunID   string
	CallKey string // the agent call that asked for the tool ("main/3")
	Tool    string
	// Arguments are the tool call's JSON arguments as the model sent them (cut to 64 KiB).
	Arguments string
	// Status is ApprovalPending, ApprovalAllowed or ApprovalDeclined.
	Status    string
	CreatedAt time.Time
	DecidedAt time.Time // zero while pending
}

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalAllowed  = "allowed"
	ApprovalDeclined = "declined"
)

// ApproveFunc answers one pending approval: allow runs the tool call, !allow tells the
// agent the user declined and it goes on. ctx ends when the run ends or the Engine is
// closed; the function should return then.
type ApproveFunc func(ctx context.Context, a Approval) (allow bool, err error)

// ApprovalError is an agent call that failed because its model asked for a destructive
// tool under [tools] approval = "ask" and the Engine asks no one (neither
// Options.Approvals nor Options.Approve is set). Run.Wait and Engine.Run return an error
// that matches it (errors.As) besides the error that stopped the run, when one of the
// run's agent calls failed so; a script that goes on after such a failure (it checks
// r.ok) completes, and its agent_done event has "approval_needed" with the tool.
type ApprovalError struct {
	RunID   string
	CallKey string
	Tool    string
	Msg     string // what to set: [tools] approval = "allow", or the Engine's Approvals
}

func (e *ApprovalError) Error() string { return e.Msg }

// Errors of Engine.Approve that callers test with errors.Is.
var (
	// ErrNoApproval: the run waits for no tool call's answer, or not for the one named.
	ErrNoApproval = runtime.ErrNoApproval
	// ErrApprovalAmbiguous: no approval id was given and the run waits on several.
	ErrApprovalAmbiguous = runtime.ErrApprovalAmbiguous
	// ErrApprovalDecided: the approval was answered already.
	ErrApprovalDecided = storage.ErrApprovalDecided
)

// Approve answers a pending approval of a run: allow runs the parked tool call, !allow
// gives the agent "the user declined" and it goes on. approvalID "" answers the run's
// only pending one (RunInfo.PendingApprovals lists them; EventApprovalRequested announces
// each). The answer is journaled before the run is told, so it holds if the run is
// stopped and resumed; a run another process drives (the CLI, the daemon, over the same
// state dir) picks it up within a moment.
func (e *Engine) Approve(ctx context.Context, runID, approvalID string, allow bool) (Approval, error) {
	if err := e.use(ctx, "Approve"); err != nil {
		return Approval{}, err
	}
	if runID == "" {
		return Approval{}, errors.New("luft: Approve: the run id is empty; List shows the runs (status awaiting_approval)")
	}
	a, err := e.svc.Approve(ctx, runID, approvalID, allow)
	if err != nil {
		return Approval{}, typed(err, runID)
	}
	return approvalOf(a), nil
}

func approvalOf(a storage.Approval) Approval {
	return Approval{ID: a.ID, RunID: a.RunID, CallKey: a.CallKey, Tool: a.Tool, Arguments: a.Arguments,
		Status: a.Status, CreatedAt: a.CreatedAt, DecidedAt: a.DecidedAt}
}

// watchApprovals calls Options.Approve for each approval r's attempt asks for, until the
// attempt ends, and answers with what it returns.
func (e *Engine) watchApprovals(r *runtime.Run) {
	e.asking.Add(1)
	go func() {
		defer e.asking.Done()
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel() // the run has ended: a question still open is moot
		for ev := range r.SubscribeAttempt(e.ctx) {
			if ev.Type != event.ApprovalRequested {
				continue
			}
			id, _ := ev.Data["approval_id"].(string)
			a := Approval{ID: id, RunID: r.ID, Status: ApprovalPending, CreatedAt: ev.TS}
			a.CallKey, _ = ev.Data["call_key"].(string)
			a.Tool, _ = ev.Data["tool"].(string)
			a.Arguments, _ = ev.Data["arguments"].(string)
			e.asking.Add(1)
			go func() {
				defer e.asking.Done()
				e.ask(ctx, a)
			}()
		}
	}()
}

// ask puts one approval to Options.Approve and answers it. An error or a panic of the
// function declines the call: nothing destructive runs without a yes, and the run does
// not wait for an answer that will not come.
func (e *Engine) ask(ctx context.Context, a Approval) {
	// The event's arguments are cut for display; the store keeps them whole.
	if all, err := e.svc.Approvals(ctx, a.RunID); err == nil {
		for _, s := range all {
			if s.ID == a.ID {
				if s.Status != storage.ApprovalPending {
					return // answered meanwhile (Engine.Approve, another process)
				}
				a = approvalOf(s)
			}
		}
	}
	allow, err := func() (allow bool, err error) {
		defer func() {
			if p := recover(); p != nil {
				allow, err = false, fmt.Errorf("luft: Options.Approve panicked: %v", p)
			}
		}()
		return e.opts.Approve(ctx, a)
	}()
	if ctx.Err() != nil {
		return // the run ended or the Engine closed: a resume asks again
	}
	if err != nil {
		allow = false
	}
	// Answered elsewhere meanwhile (ErrApprovalDecided) is fine; any other failure leaves
	// the call pending, for Engine.Approve or a resume to answer.
	_, _ = e.svc.Approve(ctx, a.RunID, a.ID, allow)
}

// withApprovalError adds to err, the error that stopped run r, an *ApprovalError when one
// of the attempt's agent calls failed for want of approval.
func (e *Engine) withApprovalError(r *runtime.Run, err error) error {
	if err == nil || e.opts.Approvals || e.opts.Approve != nil {
		return err
	}
	for ev := range r.SubscribeAttempt(e.ctx) {
		tool, _ := ev.Data["approval_needed"].(string)
		if ev.Type != event.AgentDone || tool == "" {
			continue
		}
		ae := &ApprovalError{RunID: r.ID, Tool: tool}
		ae.CallKey, _ = ev.Data["call_key"].(string)
		ae.Msg, _ = ev.Data["error"].(string)
		if ae.Msg == "" {
			ae.Msg = fmt.Sprintf("tool %s needs approval, which no one can give in this run", tool)
		}
		ae.Msg += " (or set luft.Options.Approvals or Approve to answer it from Go)"
		return &approvalStop{err: err, ae: ae}
	}
	return err
}

// approvalStop is the error that stopped a run whose agent call failed for want of
// approval: it prints as that error and matches both it and the *ApprovalError.
type approvalStop struct {
	err error
	ae  *ApprovalError
}

func (e *approvalStop) Error() string   { return e.err.Error() }
func (e *approvalStop) Unwrap() []error { return []error{e.err, e.ae} }
