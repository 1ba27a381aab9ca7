package storage

import (
	"context"
	"database/sql"
	"fmt"
)

func (tc ToolCall) check(what string) error {
	if tc.RunID == "" || tc.CallKey == "" || tc.Conversation == "" || tc.Turn < 1 {
		return fmt.Errorf("storage: %s: run id, call key, conversation and a turn from 1 are required (got %q, %q, %q, %d)",
			what, tc.RunID, tc.CallKey, tc.Conversation, tc.Turn)
	}
	return nil
}

func (tc ToolCall) subject() string {
	return fmt.Sprintf("%s %s turn %d tool call %q", tc.RunID, tc.CallKey, tc.Turn, tc.ID)
}

// ToolStarted implements Store.
func (s *sqlStore) ToolStarted(ctx context.Context, tc ToolCall) error {
	tc.Done, tc.Output = false, ""
	return s.putTool(ctx, "tool started", tc, `DO NOTHING`)
}

// ToolDone implements Store.
func (s *sqlStore) ToolDone(ctx context.Context, tc ToolCall) error {
	tc.Done = true
	return s.putTool(ctx, "tool done", tc, `DO UPDATE SET name = excluded.name,
		args_hash = excluded.args_hash, status = 'done', output = excluded.output, updated_at = excluded.updated_at`)
}

// putTool inserts tc's row (started, or done with its output); onConflict says what a
// row already there for the same tool call becomes.
func (s *sqlStore) putTool(ctx context.Context, what string, tc ToolCall, onConflict string) error {
	if err := tc.check(what); err != nil {
		return err
	}
	status, output := "started", sql.NullString{}
	if tc.Done {
		status, output = "done", sql.NullString{String: tc.Output, Valid: true}
	}
	now := fmtTime(s.now())
	fence := fenceFor(ctx, tc.RunID)
	return s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence(what, fence); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO tool_calls (run_id, call_key, conversation, turn, tool_call_id, name, args_hash,
				status, output, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (run_id, call_key, conversation, turn, tool_call_id) `+onConflict,
			tc.RunID, tc.CallKey, tc.Conversation, tc.Turn, s.bin(tc.ID), s.bin(tc.Name), tc.ArgsHash, status, s.bin(output), now, now)
		return toolErr(what, tc, err)
	})
}

// toolErr explains a failed write: a foreign-key failure means the call key has no
// journal entry (or its run is gone).
func toolErr(what string, tc ToolCall, err error) error {
	if err == nil {
		return nil
	}
	if isForeignKey(err) {
		return fmt.Errorf("storage: %s %s: the call has no journal entry (journal it as scheduled first): %w", what, tc.subject(), err)
	}
	return errf(what, tc.subject(), err)
}

// ToolCalls implements Store.
func (s *sqlStore) ToolCalls(ctx context.Context, runID, callKey string) (_ []ToolCall, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	subject := runID + " " + callKey
	rows, err := db.QueryContext(ctx, `SELECT conversation, turn, tool_call_id, name, args_hash, status, output, created_at, updated_at
		FROM tool_calls WHERE run_id = ? AND call_key = ? ORDER BY conversation, turn, tool_call_id`, runID, callKey)
	if err != nil {
		return nil, errf("tool calls of", subject, err)
	}
	defer rows.Close()
	var out []ToolCall
	for rows.Next() {
		tc := ToolCall{RunID: runID, CallKey: callKey}
		var (
			status           string
			output           sql.NullString
			created, updated string
		)
		if err := rows.Scan(&tc.Conversation, &tc.Turn, &tc.ID, &tc.Name, &tc.ArgsHash, &status, &output, &created, &updated); err != nil {
			return nil, errf("tool calls of", subject, err)
		}
		tc.Done, tc.Output = status == "done", output.String
		if tc.CreatedAt, err = parseTime(created); err == nil {
			tc.UpdatedAt, err = parseTime(updated)
		}
		if err != nil {
			return nil, errf("tool calls of", subject, err)
		}
		out = append(out, tc)
	}
	if err := rows.Err(); err != nil {
		return nil, errf("tool calls of", subject, err)
	}
	return out, nil
}
