package storage

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// DBFile is the name of the database inside the state dir.
const DBFile = "luft.db"

//go:embed migrations/*.sql
var migrationFS embed.FS

// SQLite is the durable Store: one database file per state dir, one writer connection fed
// by a group-commit goroutine, and a pool of read-only connections. It is safe for
// concurrent use, also by several processes on the same state dir.
type SQLite struct{ *sqlStore }

// sqlStore is the store both SQLite and Postgres are: the same tables, statements, writer
// goroutine and group commit over database/sql. Where the two databases differ (the
// placeholders, the types of a few columns, how sequence numbers are taken, what an error
// means), pg says which one it is.
type sqlStore struct {
	dir, path string
	w         *sql.DB // the one writer connection; only the writer goroutine uses it after Open
	r         *sql.DB // read pool (query_only)
	now       func() time.Time
	pg        bool     // PostgreSQL, not SQLite
	rebound   sync.Map // PostgreSQL: query with ? → with $n

	mu     sync.RWMutex // guards closed and sends on queue
	closed bool
	queue  chan *op
	done   chan struct{} // closed when the writer goroutine has returned

	hold      func()               // tests: the writer calls it on taking a batch's first op
	stmts     map[string]*sql.Stmt // prepared on w; the writer goroutine's alone
	toPrepare []string             // statements to prepare after the current transaction

	txs, ops, maxBatch atomic.Int64

	ckpt *checkpointer // SQLite: checkpoints the WAL off the writer's path; nil on PostgreSQL
}

// Stats are counters of the writer since Open.
type Stats struct {
	Transactions int64 // committed or attempted write transactions
	Ops          int64 // write operations submitted to them
	MaxBatch     int64 // the most operations one transaction carried
}

// Stats returns the writer's counters.
func (s *sqlStore) Stats() Stats {
	return Stats{Transactions: s.txs.Load(), Ops: s.ops.Load(), MaxBatch: s.maxBatch.Load()}
}

type config struct {
	now  func() time.Time
	hold func()
	// pgMigrations replace PostgreSQL's embedded migrations (tests of the runner).
	pgMigrations []migration
}

// Open opens (creating if needed) dir and dir/luft.db, brings the schema up to date and
// starts the writer. A file that is not a SQLite database, or a broken schema, gives a
// *CorruptError; a schema written by a newer luft gives ErrSchemaTooNew.
func Open(ctx context.Context, dir string) (*SQLite, error) {
	return open(ctx, dir, config{})
}

func open(ctx context.Context, dir string, cfg config) (*SQLite, error) {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create state dir: %w", err)
	}
	path := filepath.Join(dir, DBFile)
	unlock, err := lockSetup(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkNotEmptied(dir, path); err != nil {
		return nil, err
	}
	s := newSQLStore(dir, path, cfg)

	base := fileURI(path) + "?_pragma=busy_timeout(5000)"
	w, err := sql.Open("sqlite", base+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_pragma=wal_autocheckpoint(0)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s.w = w
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}

	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, s.classify("open read pool", err)
	}
	s.r = r
	// The checkpoints (see checkpointer): a connection that may write, on the WAL the
	// writer's migration set up.
	c, err := sql.Open("sqlite", base)
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("storage: open %s: %w", path, err)
	}
	s.ckpt = newCheckpointer(c)
	go s.writeLoop()
	return &SQLite{s}, nil
}

func newSQLStore(dir, path string, cfg config) *sqlStore {
	return &sqlStore{dir: dir, path: path, now: cfg.now, hold: cfg.hold,
		queue: make(chan *op, queueSize), done: make(chan struct{}), stmts: map[string]*sql.Stmt{}}
}

// checkNotEmptied refuses a luft.db of zero bytes in a state dir that has held runs: SQLite
// would take the empty file for a new database and every run would silently vanish. An
// empty file with nothing beside it is a state dir whose first open was cut short, and is
// used as new. The files are only looked at, never changed.
func checkNotEmptied(dir, path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Size() > 0 || !st.Mode().IsRegular() {
		return nil // missing (a new state dir) or with content: SQLite judges it
	}
	var held []string
	if runs, err := os.ReadDir(filepath.Join(dir, "runs")); err == nil && len(runs) > 0 {
		held = append(held, fmt.Sprintf("%s holds %d runs", filepath.Join(dir, "runs"), len(runs)))
	}
	if wal, err := os.Stat(path + "-wal"); err == nil && wal.Size() > 0 {
		held = append(held, fmt.Sprintf("%s-wal holds %d bytes", path, wal.Size()))
	}
	if len(held) == 0 {
		return nil
	}
	return &CorruptError{Dir: dir, File: path, Err: fmt.Errorf("the file is empty (0 bytes) but %s: it was truncated",
		strings.Join(held, " and "))}
}

// fileURI turns a path into a SQLite URI filename: '?', '#' and '%' are escaped, and a
// Windows drive path gets its leading slash.
func fileURI(path string) string {
	p := filepath.ToSlash(path)
	if filepath.VolumeName(path) != "" && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// Close waits for queued writes to commit, then closes the database. Later calls fail with
// ErrClosed.
func (s *sqlStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	return errors.Join(s.ckpt.close(), s.r.Close(), s.w.Close())
}

func (s *sqlStore) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// classify turns SQLite's "not a database" and "malformed" errors into a *CorruptError,
// a full or failing disk into an *UnwritableError, and names the operation otherwise.
func (s *sqlStore) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if isCorrupt(err) {
		return s.typed(err)
	}
	return s.typed(fmt.Errorf("storage: %s %s: %w", what, s.path, err))
}

// typed is classify for errors already named by their operation: a corrupt database or a
// failing disk anywhere in err's chain gives the typed error users act on; any other error,
// and one already typed, is returned as it is. Every error the store returns passes here.
func (s *sqlStore) typed(err error) error {
	switch {
	case err == nil || errors.Is(err, ErrCorruptState) || errors.Is(err, ErrUnwritable):
		return err
	case isCorrupt(err):
		return &CorruptError{Dir: s.dir, File: s.path, Err: err}
	}
	return Unwritable(s.dir, "", err) // err names its operation and the file
}

// typedErr is typed for a method's named error result, in a defer.
func (s *sqlStore) typedErr(err *error) { *err = s.typed(*err) }

// diskFailure says in words what went wrong when err is a failure of the disk (SQLite's
// full, I/O, read-only and cannot-open errors, or the same from the file system), and ""
// otherwise. SQLite reports a write cut short by the file size limit (EFBIG) as an I/O
// error.
func diskFailure(err error) string {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return "the disk is full"
		case sqlite3.SQLITE_IOERR:
			return "a write or read failed: the disk is full, a file reached the size limit (ulimit -f) or the disk is failing"
		case sqlite3.SQLITE_READONLY:
			return "the database cannot be written (a read-only disk or file)"
		case sqlite3.SQLITE_CANTOPEN:
			return "the database file cannot be opened or created (permissions, or a full or read-only disk)"
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "the disk is full"
	case errors.Is(err, syscall.EDQUOT):
		return "the disk quota is used up"
	case errors.Is(err, syscall.EFBIG):
		return "a file reached the size limit (ulimit -f)"
	case errors.Is(err, syscall.EROFS):
		return "the disk is read-only"
	case errors.Is(err, syscall.EIO):
		return "the disk is failing (I/O error)"
	}
	return ""
}

func isCorrupt(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return true
		}
	}
	return false
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY || pgCode(err) == pgForeignKeyViolation
}

type migration struct {
	version int
	name    string
	sql     string
}

// migrations reads migrations/NNNN_name.sql; versions must run 1, 2, 3, ... without gaps.
func migrations() ([]migration, error) { return readMigrations(migrationFS, "migrations", false) }

// readMigrations reads dir/NNNN_name.sql of fsys.
//
// With gaps (PostgreSQL's, applied by the versions schema_migrations lists) the versions
// must only be distinct and from 1.
func readMigrations(fsys fs.FS, dir string, gaps bool) ([]migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := strings.TrimSuffix(filepath.Base(n), ".sql")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("storage: migration %s: name must start with its number", n)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if gaps && m.version >= 1 && (i == 0 || m.version > out[i-1].version) {
			continue
		}
		if gaps {
			return nil, fmt.Errorf("storage: migration %s: its version must be 1 or more and no other migration's", m.name)
		}
		if m.version != i+1 {
			return nil, fmt.Errorf("storage: migration %s: expected version %d", m.name, i+1)
		}
	}
	return out, nil
}

// migrate applies the missing migrations in one BEGIN IMMEDIATE transaction, so two
// processes opening a fresh state dir at once apply them exactly once, then checks the
// schema.
func (s *sqlStore) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.classify("open", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at TEXT    NOT NULL
	) STRICT`); err != nil {
		return s.classify("migrate", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return s.classify("migrate", err)
	}
	if current > latest {
		return fmt.Errorf("storage: %s has schema version %d, this luft knows up to %d: %w; use a newer luft or another --state-dir",
			s.path, current, latest, ErrSchemaTooNew)
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			// The embedded migrations are tested on an empty database; failing on this one
			// means it holds tables luft did not create.
			return &CorruptError{Dir: s.dir, File: s.path, Err: fmt.Errorf("applying migration %s: %w", m.name, err)}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, fmtTime(s.now())); err != nil {
			return s.classify("migrate", err)
		}
	}
	if err := checkSchema(ctx, tx); err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) {
			return s.classify("check schema", err) // an I/O error, or corruption
		}
		return &CorruptError{Dir: s.dir, File: s.path, Err: err} // a table or column is missing
	}
	if err := tx.Commit(); err != nil {
		return s.classify("migrate", err)
	}
	return nil
}

// schemaColumns is the schema at the latest migration; a table or column missing from the
// database means it was damaged by hand.
var schemaColumns = map[string][]string{
	"runs": {"id", "workflow", "script_hash", "status", "error", "args_json", "report_json", "has_report",
		"input_tokens", "output_tokens", "cached_tokens", "cost", "agents_ok", "agents_failed", "agents_cached",
		"agents_cancelled", "attempt", "pid", "created_at", "updated_at", "finished_at", "resume_after", "cancel_requested", "spec_json",
		"event_seq", "journal_seq", "node", "lease_until", "workspace"},
	"events": {"run_id", "seq", "ts", "type", "data_json"},
	"journal": {"run_id", "call_key", "kind", "input_hash", "status", "result_json", "error", "input_tokens",
		"output_tokens", "cached_tokens", "cost", "attempts", "completed_seq", "where_pos", "created_at", "updated_at"},
	"phases": {"run_id", "phase_id", "label", "planned", "description", "status", "ok", "failed", "started_at", "done_at",
		"cancelled"},
	"files": {"run_id", "path", "sha256", "content", "created_at"},
	"tool_calls": {"run_id", "call_key", "conversation", "turn", "tool_call_id", "name", "args_hash", "status",
		"output", "created_at", "updated_at"},
}

func checkSchema(ctx context.Context, tx *sql.Tx) error {
	return checkColumns(ctx, tx, `SELECT name FROM pragma_table_info(?)`)
}

// checkColumns makes sure every table of schemaColumns (and the extra tables, which only
// have to exist) has the columns luft needs; columnsOf lists a table's column names,
// the table as its one parameter. Both stores check with it.
func checkColumns(ctx context.Context, tx *sql.Tx, columnsOf string, extra ...string) error {
	tables := make([]string, 0, len(schemaColumns)+len(extra))
	for t := range schemaColumns {
		tables = append(tables, t)
	}
	tables = append(tables, extra...)
	sort.Strings(tables)
	for _, t := range tables {
		rows, err := tx.QueryContext(ctx, columnsOf, t)
		if err != nil {
			return err
		}
		var have []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return err
			}
			have = append(have, n)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(have) == 0 {
			return fmt.Errorf("schema is broken: table %s is missing", t)
		}
		for _, c := range schemaColumns[t] {
			if !slices.Contains(have, c) {
				return fmt.Errorf("schema is broken: table %s has no column %s", t, c)
			}
		}
	}
	return nil
}

// tsLayout is RFC 3339 with a fixed nine-digit fraction, so stored times sort as text.
const tsLayout = "2006-01-02T15:04:05.000000000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(tsLayout) }

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return fmtTime(t)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}
