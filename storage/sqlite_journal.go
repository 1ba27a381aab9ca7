package storage

import (
	"context"
	"database/sql"
	"fmt"
)

func (e Entry) check(what string) error {
	if e.RunID == "" || e.CallKey == "" {
		return fmt.Errorf("storage: %s: run id and call key are required (got %q, %q)", what, e.RunID, e.CallKey)
	}
	return nil
}

// JournalScheduled implements Store.
func (s *sqlStore) JournalScheduled(ctx context.Context, e Entry) error {
	if err := e.check("journal scheduled"); err != nil {
		return err
	}
	now := fmtTime(s.now())
	subject := e.RunID + " " + e.CallKey
	fence := fenceFor(ctx, e.RunID)
	return s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence("journal scheduled", fence); err != nil {
			return err
		}
		// Every column is written, so a rescheduled entry keeps nothing of its past.
		_, err := tx.Exec(`INSERT INTO journal (run_id, call_key, kind, input_hash, status, result_json, error,
				input_tokens, output_tokens, cached_tokens, cost, attempts, completed_seq, where_pos, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'scheduled', NULL, '', 0, 0, 0, 0, ?, NULL, ?, ?, ?)
			ON CONFLICT (run_id, call_key) DO UPDATE SET kind = excluded.kind, input_hash = excluded.input_hash,
				status = 'scheduled', result_json = NULL, error = '', input_tokens = 0, output_tokens = 0,
				cached_tokens = 0, cost = 0, attempts = excluded.attempts, completed_seq = NULL,
				where_pos = excluded.where_pos, created_at = excluded.created_at, updated_at = excluded.updated_at`,
			e.RunID, e.CallKey, e.Kind, e.InputHash, e.Attempts, s.bin(e.WherePos), now, now)
		if err != nil {
			return fkErr("journal scheduled", subject, err)
		}
		// The entry may have held the largest completed_seq.
		return errf("journal scheduled", subject, tx.journalSeqChanged(e.RunID))
	})
}

// JournalFinish implements Store. It returns only after the entry is committed, so the
// result may be shown to the script.
func (s *sqlStore) JournalFinish(ctx context.Context, e Entry) (int64, error) {
	if err := e.check("journal finish"); err != nil {
		return 0, err
	}
	if e.Status != EntryCompleted && e.Status != EntryFailed {
		return 0, fmt.Errorf("storage: journal finish %s %s: status must be %q or %q, got %q",
			e.RunID, e.CallKey, EntryCompleted, EntryFailed, e.Status)
	}
	result, err := jsonArg("result", e.Result)
	if err != nil {
		return 0, errf("journal finish", e.RunID+" "+e.CallKey, err)
	}
	now := fmtTime(s.now())
	subject := e.RunID + " " + e.CallKey
	var seq int64
	fence := fenceFor(ctx, e.RunID)
	err = s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence("journal finish", fence); err != nil {
			return err
		}
		last, err := tx.takeSeq("journal", e.RunID, 1)
		if err != nil {
			return fkErr("journal finish", subject, err)
		}
		seq = last + 1
		_, err = tx.Exec(`INSERT INTO journal (run_id, call_key, kind, input_hash, status, result_json, error,
				input_tokens, output_tokens, cached_tokens, cost, attempts, completed_seq, where_pos, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			`+journalFinishConflict,
			e.RunID, e.CallKey, e.Kind, e.InputHash, e.Status, s.bin(result), s.bin(e.Error),
			e.Usage.Input, e.Usage.Output, e.Usage.Cached, e.Cost, e.Attempts, seq, s.bin(e.WherePos), now, now)
		if err != nil {
			return fkErr("journal finish", subject, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// journalFinishConflict is what JournalFinish does to an entry already there.
const journalFinishConflict = `ON CONFLICT (run_id, call_key) DO UPDATE SET kind = excluded.kind, input_hash = excluded.input_hash,
				status = excluded.status, result_json = excluded.result_json, error = excluded.error,
				input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
				cached_tokens = excluded.cached_tokens, cost = excluded.cost, attempts = excluded.attempts,
				completed_seq = excluded.completed_seq,
				where_pos = CASE WHEN excluded.where_pos <> '' THEN excluded.where_pos ELSE journal.where_pos END,
				updated_at = excluded.updated_at`

// Journal implements Store.
func (s *sqlStore) Journal(ctx context.Context, runID string) (_ []Entry, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT call_key, kind, input_hash, status, result_json, error,
		input_tokens, output_tokens, cached_tokens, cost, attempts, completed_seq, where_pos, created_at, updated_at
		FROM journal WHERE run_id = ? ORDER BY call_key`, runID)
	if err != nil {
		return nil, errf("journal of run", runID, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e := Entry{RunID: runID}
		var result []byte
		var seq sql.NullInt64
		var created, updated string
		if err := rows.Scan(&e.CallKey, &e.Kind, &e.InputHash, &e.Status, &result, &e.Error,
			&e.Usage.Input, &e.Usage.Output, &e.Usage.Cached, &e.Cost, &e.Attempts, &seq, &e.WherePos,
			&created, &updated); err != nil {
			return nil, errf("journal of run", runID, err)
		}
		e.Result, e.CompletedSeq = raw(result), seq.Int64
		if e.CreatedAt, err = parseTime(created); err == nil {
			e.UpdatedAt, err = parseTime(updated)
		}
		if err != nil {
			return nil, errf("journal of run", runID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, errf("journal of run", runID, err)
	}
	return out, nil
}

// InvalidateFrom implements Store.
func (s *sqlStore) InvalidateFrom(ctx context.Context, runID string, completedSeq int64) (int, error) {
	var n int64
	fence := fenceFor(ctx, runID)
	err := s.write(ctx, func(tx *wtx) error {
		if err := tx.checkFence("invalidate journal of run", fence); err != nil {
			return err
		}
		res, err := tx.Exec(`DELETE FROM journal WHERE run_id = ? AND (status = 'scheduled' OR completed_seq >= ?)`,
			runID, completedSeq)
		if err != nil {
			return errf("invalidate journal of run", runID, err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return errf("invalidate journal of run", runID, tx.journalSeqChanged(runID))
	})
	return int(n), err
}
