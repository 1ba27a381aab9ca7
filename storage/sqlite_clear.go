package storage

import (
	"context"
	"fmt"
	"time"
)

// DeleteFinished deletes the runs that ended (completed, failed or cancelled) before
// cutoff, with their events, journal, phases and pinned files (the schema cascades), and
// returns their ids so the caller can remove their folders too. Running and suspended
// runs are never deleted: one is being driven, the other waits for its resume time.
func (s *sqlStore) DeleteFinished(ctx context.Context, cutoff time.Time) ([]string, error) {
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT id FROM runs
		WHERE status IN ('completed', 'failed', 'cancelled') AND COALESCE(finished_at, updated_at) < ?
		ORDER BY created_at`, fmtTime(cutoff))
	if err != nil {
		return nil, s.classify("list finished runs", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, s.classify("list finished runs", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.classify("list finished runs", err)
	}
	var deleted []string
	err = s.write(ctx, func(tx *wtx) error {
		for _, id := range ids {
			// The status is checked again: a run resumed since the query is kept.
			res, err := tx.Exec(`DELETE FROM runs WHERE id = ? AND status IN ('completed', 'failed', 'cancelled')`, id)
			if err != nil {
				return fmt.Errorf("delete run %s: %w", id, err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				deleted = append(deleted, id)
			}
		}
		if err := tx.flush(); err != nil {
			return err
		}
		tx.forget()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return deleted, nil
}
