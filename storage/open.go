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
// names no store luft has.
var ErrBadStorageURL = errors.New("bad storage URL")

// CheckURL reports whether url names a store OpenURL can open: "" (SQLite in the state
// dir) or postgres://... / postgresql://.... The error never repeats a password.
func CheckURL(url string) error {
	if url == "" {
		return nil
	}
	scheme, rest, ok := strings.Cut(url, "://")
	switch {
	case !ok:
		return fmt.Errorf("%w: it has no scheme; write postgres://user@host:5432/dbname (or leave it empty for SQLite in the state dir)", ErrBadStorageURL)
	case scheme != "postgres" && scheme != "postgresql":
		return fmt.Errorf("%w: unknown scheme %q; luft keeps its runs in PostgreSQL (postgres://user@host:5432/dbname) or, with no URL, in SQLite in the state dir", ErrBadStorageURL, scheme)
	case strings.ContainsAny(rest, " \t\r\n"):
		return fmt.Errorf("%w: it holds a space or a line break; percent-encode it (%%20)", ErrBadStorageURL)
	}
	return nil
}

// OpenURL opens the store url names: SQLite in stateDir when url is empty (Open), the
// PostgreSQL database of a postgres:// or postgresql:// URL otherwise (OpenPostgres). With
// PostgreSQL the state dir still holds the daemon's lock, the logs and the config.
func OpenURL(ctx context.Context, url, stateDir string) (DB, error) {
	if url == "" {
		return Open(ctx, stateDir)
	}
	if err := CheckURL(url); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return OpenPostgres(ctx, url, stateDir)
}
