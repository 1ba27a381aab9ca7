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
	var skipped []skippedLease
	err = s.write(ctx, func(tx *wtx) error {
		lost, skipped = lost[:0], skipped[:0]
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
			var ends []sql.NullString
			rows, err := tx.Query(`SELECT lease_until FROM runs WHERE id = ? AND attempt = ? AND node = ?`, l.RunID, l.Attempt, n.ID)
			if err != nil {
				return errf("renew the lease of run", l.RunID, err)
			}
			for rows.Next() {
				var e sql.NullString
				if err := rows.Scan(&e); err != nil {
					rows.Close()
					return errf("renew the lease of run", l.RunID, err)
				}
				ends = append(ends, e)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return errf("renew the lease of run", l.RunID, err)
			}
			switch {
			case len(ends) == 0:
				lost = append(lost, l)
			case s.pg:
				skipped = append(skipped, skippedLease{l, ends[0].String})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(skipped) > 0 {
		lost = append(lost, s.renewSkipped(ctx, n, until, skipped)...)
	}
	return lost, nil
}

// skippedLease is a held run whose row a renewal skipped because a transaction held it,
// with the lease end the row had then.
type skippedLease struct {
	Lease
	until string
}

// renewSkipped renews, on PostgreSQL, the leases the renewal's transaction skipped
// because another transaction held their rows, most often the node's own writer fencing
// a write. Skipping alone is not enough: under a steady load the writer holds a busy
// run's row most of the time, and renewal after renewal skipped it until its lease
// lapsed under a node that was alive (another node then took the run over and sent its
// calls in flight again). So each skipped row is renewed on its own, in a transaction
// of its own that holds no other lock (it cannot deadlock with the writer), waiting for
// the row at most what is left of a budget of a tenth of the lease; the rows whose lease
// ends first go first. A row still held when the budget is spent is renewed next time.
// It returns the leases found lost meanwhile.
func (s *sqlStore) renewSkipped(ctx context.Context, n Node, until time.Time, skipped []skippedLease) (lost []Lease) {
	slices.SortFunc(skipped, func(a, b skippedLease) int { return strings.Compare(a.until, b.until) })
	deadline := time.Now().Add(max(until.Sub(s.now())/10, 10*time.Millisecond))
	lease := fmtTime(until)
	for _, l := range skipped {
		wait := time.Until(deadline)
		if wait <= 0 || ctx.Err() != nil {
			break
		}
		var renewed, still int64
		err := s.write(ctx, func(tx *wtx) error {
			renewed, still = 0, 0
			if _, err := tx.Exec(`SELECT set_config('lock_timeout', ?, true)`, fmt.Sprintf("%dms", max(wait.Milliseconds(), 1))); err != nil {
				return err
			}
			res, err := tx.Exec(`UPDATE runs SET lease_until = ? WHERE id = ? AND attempt = ? AND node = ?`, lease, l.RunID, l.Attempt, n.ID)
			if err != nil {
				return err
			}
			if renewed, _ = res.RowsAffected(); renewed > 0 {
				return nil
			}
			return tx.QueryRow(`SELECT COUNT(*) FROM runs WHERE id = ? AND attempt = ? AND node = ?`, l.RunID, l.Attempt, n.ID).Scan(&still)
		})
		if err == nil && renewed == 0 && still == 0 {
			lost = append(lost, l.Lease)
		}
		// A lock wait that timed out (or any other failure) leaves the row to the next
		// renewal, as a skip does.
	}
	return lost
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
