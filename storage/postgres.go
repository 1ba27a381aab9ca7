package storage

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed migrations_pg/*.sql
var pgMigrationFS embed.FS

// Postgres is the Store on a PostgreSQL server, for several luft processes on several
// machines sharing their runs (SPEC §9). It has the tables, statements, writer goroutine
// and group commit of SQLite, and answers every call as SQLite does; what differs is in
// migrations_pg and the package doc. It is safe for concurrent use, also by many
// processes on one database.
type Postgres struct {
	*sqlStore
	budget *sql.DB // the shared budgets' own connections (budgets.go)
}

// pgMigrateLock is the advisory lock key migrations are applied under ("luft" in ASCII).
const pgMigrateLock = 0x6c756674

// OpenPostgres connects to the PostgreSQL database url names (postgres://... or
// postgresql://..., the forms libpq takes), brings its schema up to date under an advisory
// lock, so many processes starting at once migrate it once, and starts the writer.
// stateDir is the local state dir the caller keeps beside it (logs, locks, config); it
// only names the store in errors.
func OpenPostgres(ctx context.Context, url, stateDir string) (*Postgres, error) {
	s, err := openPG(ctx, url, stateDir, config{})
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(url)
	if err != nil { // parsed once already by openPG
		s.Close()
		return nil, fmt.Errorf("storage: %w: %w", ErrBadStorageURL, err)
	}
	return &Postgres{sqlStore: s, budget: openBudgetDB(cc)}, nil
}

func openPG(ctx context.Context, url, dir string, cfg config) (*sqlStore, error) {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("storage: %w: %w (a PostgreSQL URL looks like postgres://user:password@host:5432/dbname, or postgres:///dbname?host=/run/postgresql for a unix socket)", ErrBadStorageURL, err)
	}
	s := newSQLStore(dir, pgName(cc), cfg)
	s.pg = true

	wc := cc.Copy()
	// A process stopped in the middle of a write transaction (SIGSTOP, a VM paused)
	// holds the row locks it took, the fence's among them, and would block every other
	// node's claim of its runs until it woke: the server ends such a session after 2 s
	// idle in its transaction (the URL may set another value). Writes never sit idle in
	// a transaction on their own: one that does is a stopped process's.
	if _, ok := wc.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		wc.RuntimeParams["idle_in_transaction_session_timeout"] = "2000"
	}
	s.w = stdlib.OpenDB(*wc)
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := s.migratePG(ctx); err != nil {
		s.w.Close()
		return nil, err
	}
	rc := cc.Copy()
	rc.RuntimeParams["default_transaction_read_only"] = "on"
	s.r = stdlib.OpenDB(*rc)
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	if err := s.r.PingContext(ctx); err != nil {
		s.r.Close()
		s.w.Close()
		return nil, fmt.Errorf("storage: open read pool of %s: %w", s.path, err)
	}
	go s.writeLoop()
	return s, nil
}

// pgName names the database in messages, without its password.
func pgName(cc *pgx.ConnConfig) string {
	host := cc.Host
	if cc.Port != 0 && (len(host) == 0 || host[0] != '/') {
		host = net.JoinHostPort(host, strconv.Itoa(int(cc.Port)))
	}
	return fmt.Sprintf("PostgreSQL database %q on %s as %s", cc.Database, host, cc.User)
}

// migratePG applies the missing migrations in one transaction that holds an advisory lock
// until it commits, so concurrent first opens apply them once, then checks the schema.
func (s *sqlStore) migratePG(ctx context.Context) error {
	ms, err := readMigrations(pgMigrationFS, "migrations_pg")
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storage: connect to %s: %w (check that the server is up and that the storage URL names it)", s.path, err)
	}
	defer tx.Rollback()
	fail := func(what string, err error) error { return fmt.Errorf("storage: %s %s: %w", what, s.path, err) }
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLock); err != nil {
		return fail("lock for migration", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    bigint NOT NULL PRIMARY KEY,
		name       text   NOT NULL,
		applied_at text   NOT NULL
	)`); err != nil {
		return fail("migrate", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fail("migrate", err)
	}
	if current > latest {
		return fmt.Errorf("storage: %s has schema version %d, this luft knows up to %d: %w; use a newer luft or another database",
			s.path, current, latest, ErrSchemaTooNew)
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("storage: %s: %w: applying migration %s: %v; luft needs a database of its own: "+
				"point [storage] url (or LUFT_STORAGE_URL) at an empty database", s.path, ErrCorruptState, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, fmtTime(s.now())); err != nil {
			return fail("migrate", err)
		}
	}
	if err := checkSchemaPG(ctx, tx); err != nil {
		return fmt.Errorf("storage: %s: %w: %v; luft never drops tables: restore them, or point [storage] url at another database",
			s.path, ErrCorruptState, err)
	}
	if err := tx.Commit(); err != nil {
		return fail("migrate", err)
	}
	return nil
}

func checkSchemaPG(ctx context.Context, tx *sql.Tx) error {
	return checkColumns(ctx, tx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, "approvals")
}

var _ Store = (*Postgres)(nil)
