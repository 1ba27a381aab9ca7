package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/luft-run/luft/event"
)

// eventRow is an event ready for the writer: its fields are marshalled on the caller's
// goroutine, so the writer only executes SQL.
type eventRow struct {
	ts, data string
	phase    *phaseRow
}

// phaseRow is what a phase_started or phase_done event changes in the phases table.
type phaseRow struct {
	done               bool
	id, planned        int64
	ok, failed         int64
	cancelled          int64
	label, description string
}

// marshalData writes the event's fields as a JSON object with sorted keys, leaving out the
// envelope keys (as event.Event.MarshalJSON does).
func marshalData(data map[string]any) (string, error) {
	if len(data) == 0 {
		return "{}", nil
	}
	m := data
	for _, k := range []string{"seq", "run_id", "ts", "type"} {
		if _, ok := data[k]; ok {
			m = make(map[string]any, len(data))
			for k, v := range data {
				switch k {
				case "seq", "run_id", "ts", "type":
				default:
					m[k] = v
				}
			}
			break
		}
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// toInt reads a whole number from an event field (Go ints, float64 after a JSON round
// trip, json.Number).
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), true
	case float32:
		return int64(n), float64(n) == math.Trunc(float64(n))
	case float64:
		return int64(n), n == math.Trunc(n)
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func phaseOf(ev event.Event) *phaseRow {
	if ev.Type != event.PhaseStarted && ev.Type != event.PhaseDone {
		return nil
	}
	id, ok := toInt(ev.Data["phase_id"])
	if !ok {
		return nil // the event is still stored; there is no phase to project it on
	}
	p := &phaseRow{done: ev.Type == event.PhaseDone, id: id}
	p.label, _ = ev.Data["label"].(string)
	p.description, _ = ev.Data["description"].(string)
	p.planned, _ = toInt(ev.Data["planned"])
	p.ok, _ = toInt(ev.Data["ok"])
	p.failed, _ = toInt(ev.Data["failed"])
	p.cancelled, _ = toInt(ev.Data["cancelled"])
	return p
}

// Append implements EventLog. Seqs are stamped inside the write transaction, so they are
// gap-free and unique per run even with several processes appending. A phase_started or
// phase_done event also updates the phases table in the same transaction. The run must
// exist (ErrRunNotFound otherwise). Events without a TS get the current time.
func (s *sqlStore) Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error) {
	return s.AppendAsync(ctx, runID, evs...)()
}

// AppendAsync queues evs as Append does and returns at once; wait blocks until they are
// committed and returns them stamped (call it any number of times). Calls queued one after another get increasing seqs
// in that order, so a caller that must keep its events in order can queue under its own
// lock and wait outside it, and concurrent emitters then share commits instead of paying
// one transaction each.
func (s *sqlStore) AppendAsync(ctx context.Context, runID string, evs ...event.Event) (wait func() ([]event.Event, error)) {
	fail := func(err error) func() ([]event.Event, error) {
		return func() ([]event.Event, error) { return nil, err }
	}
	if len(evs) == 0 {
		return func() ([]event.Event, error) { return evs, nil }
	}
	fn, out, err := s.appendOp(ctx, runID, evs)
	if err != nil {
		return fail(err)
	}
	o, err := s.submit(ctx, fn)
	if err != nil {
		return fail(err)
	}
	return sync.OnceValues(func() ([]event.Event, error) {
		if err := <-o.done; err != nil {
			return nil, s.typed(err)
		}
		return out, nil
	})
}

// appendOp checks and encodes evs and returns the writer's op that appends them to the
// run's log, with the events it stamps as it runs (see AppendAsync).
func (s *sqlStore) appendOp(ctx context.Context, runID string, evs []event.Event) (func(tx *wtx) error, []event.Event, error) {
	out := make([]event.Event, len(evs))
	rows := make([]eventRow, len(evs))
	now := s.now()
	for i, ev := range evs {
		if ev.Type == "" {
			return nil, nil, fmt.Errorf("storage: append to run %s: event %d has no type", runID, i)
		}
		ev.RunID = runID
		ev.Seq = 0
		if ev.TS.IsZero() {
			ev.TS = now
		}
		data, err := marshalData(ev.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("storage: append %s to run %s: %w", ev.Type, runID, err)
		}
		out[i] = ev
		rows[i] = eventRow{ts: fmtTime(ev.TS), data: data, phase: phaseOf(ev)}
	}
	fence := fenceFor(ctx, runID)
	return func(tx *wtx) error {
		if err := tx.checkFence("append to run", fence); err != nil {
			return err
		}
		last, err := tx.takeSeq("event", runID, int64(len(out)))
		if err != nil {
			return fkErr("append to run", runID, err)
		}
		for i := range out {
			out[i].Seq = last + int64(i) + 1
			if _, err := tx.Exec(`INSERT INTO events (run_id, seq, ts, type, data_json) VALUES (?, ?, ?, ?, ?)`,
				runID, out[i].Seq, rows[i].ts, out[i].Type, s.bin(rows[i].data)); err != nil {
				return fkErr("append to run", runID, err)
			}
			if p := rows[i].phase; p != nil {
				if err := s.projectPhase(tx, runID, rows[i].ts, p); err != nil {
					return errf("project phase of run", runID, err)
				}
			}
		}
		return nil
	}, out, nil
}

func (s *sqlStore) projectPhase(tx *wtx, runID, ts string, p *phaseRow) error {
	if !p.done {
		// A resumed run starts its phases again: reset the counters and the end.
		_, err := tx.Exec(`INSERT INTO phases (run_id, phase_id, label, planned, description, status, started_at)
			VALUES (?, ?, ?, ?, ?, 'running', ?)
			ON CONFLICT (run_id, phase_id) DO UPDATE SET label = excluded.label, planned = excluded.planned,
				description = excluded.description, status = 'running', ok = 0, failed = 0, cancelled = 0,
				started_at = excluded.started_at, done_at = NULL`,
			runID, p.id, s.bin(p.label), p.planned, s.bin(p.description), ts)
		return err
	}
	_, err := tx.Exec(`INSERT INTO phases (run_id, phase_id, label, status, ok, failed, cancelled, done_at)
		VALUES (?, ?, ?, 'done', ?, ?, ?, ?)
		ON CONFLICT (run_id, phase_id) DO UPDATE SET status = 'done', ok = excluded.ok, failed = excluded.failed,
			cancelled = excluded.cancelled, done_at = excluded.done_at,
			label = CASE WHEN excluded.label <> '' THEN excluded.label ELSE phases.label END`,
		runID, p.id, s.bin(p.label), p.ok, p.failed, p.cancelled, ts)
	return err
}

// Events implements EventLog. An unknown run gives ErrRunNotFound.
func (s *sqlStore) Events(ctx context.Context, runID string, since int64, limit int) ([]event.Event, error) {
	return s.EventsOfType(ctx, runID, since, limit, nil)
}

// EventsOfType implements EventLog. Event fields come back as encoding/json decodes them
// (numbers are float64), as event.Event.UnmarshalJSON does.
func (s *sqlStore) EventsOfType(ctx context.Context, runID string, since int64, limit int, types []string) (_ []event.Event, err error) {
	defer s.typedErr(&err)
	db, err := s.reader()
	if err != nil {
		return nil, err
	}
	var lim any = limit
	if limit <= 0 {
		lim = s.noLimit()
	}
	q := `SELECT seq, ts, type, data_json FROM events WHERE run_id = ? AND seq > ?`
	args := []any{runID, since}
	if len(types) > 0 {
		q += ` AND type IN (?` + strings.Repeat(", ?", len(types)-1) + `)`
		for _, t := range types {
			args = append(args, t)
		}
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, lim)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, errf("events of run", runID, err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		ev := event.Event{RunID: runID}
		var ts string
		var data []byte
		if err := rows.Scan(&ev.Seq, &ts, &ev.Type, &data); err != nil {
			return nil, errf("events of run", runID, err)
		}
		if ev.TS, err = parseTime(ts); err != nil {
			return nil, errf("events of run", runID, err)
		}
		if err := json.Unmarshal(data, &ev.Data); err != nil {
			return nil, errf("events of run", runID, fmt.Errorf("event %d: %w", ev.Seq, err))
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, errf("events of run", runID, err)
	}
	if len(out) == 0 {
		var one int
		err := db.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("storage: events of run %s: %w", runID, ErrRunNotFound)
		}
		if err != nil {
			return nil, errf("events of run", runID, err)
		}
	}
	return out, nil
}
