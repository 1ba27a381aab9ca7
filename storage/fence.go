package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrOwnershipLost means a write fenced on a run's attempt (WithFence) found the run at
// another attempt: another process claimed the run (UpdateRun with IfAttempt) since this
// one did, and this one must stop driving it. Nothing of the refused write is stored.
var ErrOwnershipLost = errors.New("ownership of the run was lost")

// fenceKey is the context key of a Fence.
type fenceKey struct{}

// Fence is the claim a context's writes are checked against.
type Fence struct {
	RunID   string
	Attempt int // the epoch: the run's attempt when this process claimed it
}

// WithFence returns ctx whose writes for runID — Append, AppendAsync, JournalScheduled,
// JournalFinish, InvalidateFrom, ToolStarted, ToolDone, AskApproval, SaveFile and UpdateRun
// — apply only while the run's attempt is attempt, in the same transaction as the write,
// and otherwise fail with ErrOwnershipLost. Writes for other runs, and CreateRun,
// RequestCancel and DecideApproval (which anyone may make), are not checked. The process
// driving a run claims it (UpdateRun with IfAttempt and Attempt+1) and then writes through
// the fenced context, so a paused old owner that wakes after a takeover cannot write.
func WithFence(ctx context.Context, runID string, attempt int) context.Context {
	return context.WithValue(ctx, fenceKey{}, Fence{RunID: runID, Attempt: attempt})
}

// FenceOf returns the fence ctx carries.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// fenceFor is the fence of ctx that applies to a write for runID.
func fenceFor(ctx context.Context, runID string) *Fence {
	if f, ok := FenceOf(ctx); ok && f.RunID == runID {
		return &f
	}
	return nil
}

// checkFence fails the write with ErrOwnershipLost unless the run is still at f's attempt.
// On PostgreSQL it locks the run's row (FOR UPDATE) until the transaction ends, so no
// claim commits between the check and the write; SQLite's transaction holds the database's
// write lock already. A run checked once in a transaction is not read again in it.
func (w *wtx) checkFence(what string, f *Fence) error {
	if f == nil {
		return nil
	}
	if a, ok := w.fenced[f.RunID]; ok && a == f.Attempt {
		return nil
	}
	q := `SELECT attempt FROM runs WHERE id = ?`
	if w.s.pg {
		q += ` FOR UPDATE`
	}
	var attempt int
	err := w.QueryRow(q, f.RunID).Scan(&attempt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("storage: %s %s: %w (create the run first)", what, f.RunID, ErrRunNotFound)
	case err != nil:
		return errf(what, f.RunID, err)
	case attempt != f.Attempt:
		return fmt.Errorf("storage: %s %s: %w: it is at attempt %d, this process drives attempt %d (another process took the run over)",
			what, f.RunID, ErrOwnershipLost, attempt, f.Attempt)
	}
	w.fenced[f.RunID] = attempt
	return nil
}
