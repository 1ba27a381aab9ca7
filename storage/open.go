package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
)

// DB is an open store, as OpenURL returns it: the Store, the writes the runtime and `luft
// clear` use when a store has them, the writer's counters, and Close. *SQLite and
// *Postgres are DBs.
type DB interface {
	Store
	// AppendAsync queues an append and returns a wait for its commit (see SQLite.AppendAsync).
	AppendAsync(ctx context.Context, runID string, evs ...event.Event) (wait func() ([]event.Event, error))
	// RecordRun creates a run, appends to its log and updates its row in one transaction
	// (see SQLite.RecordRun).
	RecordRun(ctx context.Context, runID string, rec RunRecord) ([]event.Event, error)
	// DeleteFinished deletes the runs that ended before cutoff (see SQLite.DeleteFinished).
	DeleteFinished(ctx context.Context, cutoff time.Time) ([]string, error)
	Stats() Stats
	Close() error
}

var (
	_ DB = (*SQLite)(nil)
	_ DB = (*Postgres)(nil)
)

// ErrBadStorageURL means a storage URL ([storage] url, LUFT_STORAGE_URL, Options.StorageURL)
// names no store luft has (config.CheckStorageURL says why in more words).
var ErrBadStorageURL = errors.New("bad storage URL")

// OpenURL opens the store url names: SQLite in stateDir when url is empty (Open), the
// PostgreSQL database of a postgres:// or postgresql:// URL otherwise (OpenPostgres). With
// PostgreSQL the state dir still holds the daemon's lock, the logs and the config.
func OpenURL(ctx context.Context, url, stateDir string) (DB, error) {
	if url == "" {
		return Open(ctx, stateDir)
	}
	scheme, _, ok := strings.Cut(url, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return nil, fmt.Errorf("storage: %w: it must be a postgres:// or postgresql:// URL, or empty for SQLite in the state dir", ErrBadStorageURL)
	}
	return OpenPostgres(ctx, url, stateDir)
}
