package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Heartbeat implements Store.
func (s *sqlStore) Heartbeat(ctx context.Context, n Node, until time.Time, held []Lease) (lost []Lease, err error) {
	if n.ID == "" {
		return nil, errors.New("storage: heartbeat: empty node id")
	}
	now := fmtTime(s.now())
	started := now
	if !n.StartedAt.IsZero() {
		started = fmtTime(n.StartedAt)
	}
	lease := fmtTime(until)
	err = s.write(ctx, func(tx *wtx) error {
		lost = lost[:0]
		if _, err := tx.Exec(`INSERT INTO nodes (id, address, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, pid = excluded.pid,
			started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
			n.ID, n.Address, n.PID, started, now); err != nil {
			return errf("heartbeat of node", n.ID, err)
		}
		// In one order, and on PostgreSQL without waiting for a row another transaction
		// holds (the node's own writer fencing a write, another node's claim): a renewal
		// never waits behind, or deadlocks with, the writes it keeps alive. A row skipped
		// so is renewed next time, unless it has changed hands by then.
		held = slices.Clone(held)
		slices.SortFunc(held, func(a, b Lease) int { return strings.Compare(a.RunID, b.RunID) })
		renew := `UPDATE runs SET lease_until = ? WHERE id = ? AND attempt = ? AND node = ?`
		if s.pg {
			renew = `UPDATE runs SET lease_until = ? WHERE id = (SELECT id FROM runs WHERE id = ? AND attempt = ? AND node = ? FOR UPDATE SKIP LOCKED)`
		}
		for _, l := range held {
			res, err := tx.Exec(renew, lease, l.RunID, l.Attempt, n.ID)
			if err != nil {
				return errf("renew the lease of run", l.RunID, err)
			}
			if k, _ := res.RowsAffected(); k > 0 {
				continue
			}
			var still int
			err = tx.QueryRow(`SELECT COUNT(*) FROM runs WHERE id = ? AND attempt = ? AND node = ?`, l.RunID, l.Attempt, n.ID).Scan(&still)
			if err != nil {
				return errf("renew the lease of run", l.RunID, err)
			}
			if still == 0 {
				lost = append(lost, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// Nodes implements Store.
func (s *sqlStore) Nodes(ctx context.Context) (_ []Node, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT id, address, pid, started_at, heartbeat_at,
		(SELECT COUNT(*) FROM runs WHERE runs.node = nodes.id AND runs.status = 'running')
		FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("storage: list nodes: %w", err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		var n Node
		var started, beat string
		if err := rows.Scan(&n.ID, &n.Address, &n.PID, &started, &beat, &n.Runs); err != nil {
			return nil, fmt.Errorf("storage: list nodes: %w", err)
		}
		var e1, e2 error
		n.StartedAt, e1 = parseTime(started)
		n.HeartbeatAt, e2 = parseTime(beat)
		if err := errors.Join(e1, e2); err != nil {
			return nil, fmt.Errorf("storage: list nodes: node %s: %w", n.ID, err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// Claimable implements Store.
func (s *sqlStore) Claimable(ctx context.Context, now time.Time, limit int) ([]Run, error) {
	t := fmtTime(now)
	var out []Run
	for _, q := range []struct {
		where string
		args  []any
	}{
		{`status = 'running' AND lease_until IS NOT NULL AND lease_until < ? ORDER BY lease_until, id`, []any{t}},
		{`status = 'running' AND lease_until IS NULL ORDER BY created_at, id`, nil},
		{`status = 'suspended' AND resume_after IS NOT NULL AND resume_after <= ? ORDER BY resume_after, id`, []any{t}},
	} {
		sqlq := `SELECT ` + runColumns + ` FROM runs WHERE ` + q.where
		args := q.args
		if limit > 0 {
			if len(out) >= limit {
				break
			}
			sqlq += ` LIMIT ?`
			args = append(args, limit-len(out))
		}
		runs, err := s.queryRuns(ctx, sqlq, args...)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("storage: list claimable runs: %w", err)
		}
		out = append(out, runs...)
	}
	return out, nil
}
