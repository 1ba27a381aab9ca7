package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalAllowed  = "allowed"
	ApprovalDeclined = "declined"
)

var (
	// ErrApprovalNotFound means the run has no approval with the given id.
	ErrApprovalNotFound = errors.New("approval not found")
	// ErrApprovalDecided means the approval was answered already; the error that wraps
	// it names the answer.
	ErrApprovalDecided = errors.New("approval already answered")
)

// maxApprovalArgs bounds the arguments an approval keeps for display.
const maxApprovalArgs = 64 << 10

// Approval is a destructive tool call that waits, or waited, for a person's answer
// under [tools] approval = "ask". It belongs to the journal entry of its call key and is
// found again, like a ToolCall, by (conversation, turn, tool call id).
type Approval struct {
	RunID        string    `json:"run_id"`
	ID           string    `json:"id"`
	CallKey      string    `json:"call_key"`
	Conversation string    `json:"-"`
	Turn         int       `json:"turn"`
	ToolCallID   string    `json:"tool_call_id"`
	Tool         string    `json:"tool"`
	Arguments    string    `json:"arguments"` // as the model sent them, cut to 64 KiB
	ArgsHash     string    `json:"-"`
	Status       string    `json:"status"` // one of the Approval constants
	CreatedAt    time.Time `json:"created_at"`
	DecidedAt    time.Time `json:"decided_at,omitzero"`
}

// Allowed reports whether the approval was answered yes.
func (a Approval) Allowed() bool { return a.Status == ApprovalAllowed }

// ApprovalFilter selects approvals: RunID "" means every run, CallKey "" every call key
// of the run, Pending only the unanswered ones.
type ApprovalFilter struct {
	RunID   string
	CallKey string
	Pending bool
}

// AskApproval implements Store.
func (s *sqlStore) AskApproval(ctx context.Context, a Approval) (Approval, error) {
	if a.RunID == "" || a.ID == "" || a.CallKey == "" || a.Conversation == "" || a.Turn < 1 || a.Tool == "" {
		return Approval{}, fmt.Errorf("storage: ask approval: run id, id, call key, conversation, tool and a turn from 1 are required (got %q, %q, %q, %q, %q, %d)",
			a.RunID, a.ID, a.CallKey, a.Conversation, a.Tool, a.Turn)
	}
	if len(a.Arguments) > maxApprovalArgs {
		n := maxApprovalArgs
		for n > 0 && !utf8.RuneStart(a.Arguments[n]) {
			n-- // whole characters only: the cut text is shown
		}
		a.Arguments = a.Arguments[:n]
	}
	a.Status, a.CreatedAt, a.DecidedAt = ApprovalPending, s.now(), time.Time{}
	subject := a.RunID + " " + a.CallKey + " " + a.Tool
	var stored Approval
	fence := fenceFor(ctx, a.RunID)
	err := s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence("ask approval", fence); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO approvals (run_id, id, call_key, conversation, turn, tool_call_id, tool, arguments,
				args_hash, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`,
			a.RunID, a.ID, a.CallKey, a.Conversation, a.Turn, s.bin(a.ToolCallID), s.bin(a.Tool), s.bin(a.Arguments), a.ArgsHash, a.Status, fmtTime(a.CreatedAt))
		if err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("storage: ask approval %s: the call has no journal entry (journal it as scheduled first): %w", subject, err)
			}
			return errf("ask approval", subject, err)
		}
		rows, err := tx.Query(`SELECT `+approvalColumns+` FROM approvals WHERE run_id = ? AND (id = ? OR
			(call_key = ? AND conversation = ? AND turn = ? AND tool_call_id = ?))`,
			a.RunID, a.ID, a.CallKey, a.Conversation, a.Turn, s.bin(a.ToolCallID))
		if err != nil {
			return errf("ask approval", subject, err)
		}
		defer rows.Close()
		got, err := scanApprovals(rows)
		if err != nil {
			return errf("ask approval", subject, err)
		}
		if len(got) == 0 {
			return errf("ask approval", subject, errors.New("the row was not stored"))
		}
		stored = got[0]
		return nil
	})
	return stored, err
}

// DecideApproval implements Store.
func (s *sqlStore) DecideApproval(ctx context.Context, runID, id string, allow bool) (Approval, error) {
	status := ApprovalDeclined
	if allow {
		status = ApprovalAllowed
	}
	subject := runID + " " + id
	var out Approval
	err := s.write(ctx, func(tx *wtx) error {
		rows, err := tx.Query(`SELECT `+approvalColumns+` FROM approvals WHERE run_id = ? AND id = ?`, runID, id)
		if err != nil {
			return errf("decide approval", subject, err)
		}
		got, err := scanApprovals(rows)
		rows.Close()
		if err != nil {
			return errf("decide approval", subject, err)
		}
		if len(got) == 0 {
			return errf("decide approval", subject, ErrApprovalNotFound)
		}
		out = got[0]
		if out.Status != ApprovalPending {
			return fmt.Errorf("storage: decide approval %s: %w (%s)", subject, ErrApprovalDecided, out.Status)
		}
		now := s.now()
		if _, err := tx.Exec(`UPDATE approvals SET status = ?, decided_at = ? WHERE run_id = ? AND id = ? AND status = 'pending'`,
			status, fmtTime(now), runID, id); err != nil {
			return errf("decide approval", subject, err)
		}
		if err := tx.notify(Notice{Kind: NoticeApproval, RunID: runID, ApprovalID: id}); err != nil {
			return errf("decide approval", subject, err)
		}
		out.Status, out.DecidedAt = status, now
		return nil
	})
	return out, err
}

const approvalColumns = `run_id, id, call_key, conversation, turn, tool_call_id, tool, arguments, args_hash, status, created_at, decided_at`

// Approvals implements Store.
func (s *sqlStore) Approvals(ctx context.Context, f ApprovalFilter) (_ []Approval, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	if f.RunID != "" {
		where, args = append(where, "run_id = ?"), append(args, f.RunID)
	}
	if f.CallKey != "" {
		where, args = append(where, "call_key = ?"), append(args, f.CallKey)
	}
	if f.Pending {
		where = append(where, "status = 'pending'")
	}
	q := `SELECT ` + approvalColumns + ` FROM approvals`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := db.QueryContext(ctx, q+` ORDER BY run_id, created_at, id`, args...)
	if err != nil {
		return nil, errf("approvals of", f.RunID, err)
	}
	defer rows.Close()
	out, err := scanApprovals(rows)
	if err != nil {
		return nil, errf("approvals of", f.RunID, err)
	}
	return out, nil
}

func scanApprovals(rows *sql.Rows) ([]Approval, error) {
	var out []Approval
	for rows.Next() {
		var (
			a       Approval
			created string
			decided sql.NullString
		)
		if err := rows.Scan(&a.RunID, &a.ID, &a.CallKey, &a.Conversation, &a.Turn, &a.ToolCallID, &a.Tool, &a.Arguments,
			&a.ArgsHash, &a.Status, &created, &decided); err != nil {
			return nil, err
		}
		var err error
		if a.CreatedAt, err = parseTime(created); err == nil {
			a.DecidedAt, err = parseNullTime(decided)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
