package storage

import (
	"context"
	"errors"

	"github.com/luft-run/luft/event"
)

// RunRecord is one write of a run's record: the run created (when Create is set), then
// Events appended to its log, then Update applied to its row (the zero RunUpdate
// changes nothing). RecordRun makes it in one transaction.
type RunRecord struct {
	Create *Run
	Events []event.Event
	Update RunUpdate
}

// RecordRun makes rec for run runID in one transaction, so that it commits whole or not
// at all and costs its caller one commit's wait, not one per part: a door recording a
// turn's events and its run's new totals. It returns once rec is durable, with the
// events stamped as Append stamps them. Each part fails as CreateRun, Append and
// UpdateRun do (ErrRunExists, ErrRunNotFound, a fence's ErrFenced), and then nothing of
// rec is stored. Create.ID, when set, must be runID.
func (s *sqlStore) RecordRun(ctx context.Context, runID string, rec RunRecord) ([]event.Event, error) {
	var parts []func(tx *wtx) error
	if rec.Create != nil {
		if rec.Create.ID != runID {
			return nil, errf("record run", runID, errors.New("its Create names another run, "+rec.Create.ID))
		}
		fn, err := s.createOp(*rec.Create)
		if err != nil {
			return nil, err
		}
		parts = append(parts, fn)
	}
	var out []event.Event
	if len(rec.Events) > 0 {
		fn, evs, err := s.appendOp(ctx, runID, rec.Events)
		if err != nil {
			return nil, err
		}
		parts, out = append(parts, fn), evs
	}
	if rec.Update != (RunUpdate{}) {
		fn, err := s.updateOp(ctx, runID, rec.Update)
		if err != nil {
			return nil, err
		}
		parts = append(parts, fn)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	err := s.write(ctx, func(tx *wtx) error {
		for _, fn := range parts {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
