package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
)

// RunDir is the folder of run id under the state dir, where its pinned scripts, a planned
// script and its auto-fixes live; "" when the service has no state dir.
func (s *Service) RunDir(id string) string {
	if s.opts.StateDir == "" {
		return ""
	}
	return filepath.Join(s.opts.StateDir, "runs", id)
}

// finishedDeleter is the part of the store that deletes finished runs.
type finishedDeleter interface {
	DeleteFinished(ctx context.Context, cutoff time.Time) ([]string, error)
}

// DeleteFinished deletes the runs that ended (completed, failed or cancelled) before
// cutoff, their rows and their folders, and returns their ids. A folder whose id is not a
// run id luft makes (a damaged database could hold "../.."), is never removed: the id is
// reported in the returned warning instead. Warnings do not stop the deletion.
func (s *Service) DeleteFinished(ctx context.Context, cutoff time.Time) (ids []string, warn error, err error) {
	st, ok := s.opts.Store.(finishedDeleter)
	if !ok {
		return nil, nil, errors.New("clear: this store cannot delete runs")
	}
	ids, err = st.DeleteFinished(ctx, cutoff)
	if err != nil {
		return nil, nil, err
	}
	var warns []error
	for _, id := range ids {
		if u, perr := uuid.Parse(id); perr != nil || u.String() != id {
			warns = append(warns, fmt.Errorf("run %q: not a run id, its folder is left alone", id))
			continue
		}
		if dir := s.RunDir(id); dir != "" {
			if rerr := os.RemoveAll(dir); rerr != nil {
				warns = append(warns, fmt.Errorf("remove the folder of run %s: %w", id, rerr))
			}
		}
	}
	return ids, errors.Join(warns...), nil
}
