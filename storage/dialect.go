package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// The statements are written once, in SQLite's dialect with ? placeholders; these helpers
// are the few places where PostgreSQL needs something else.

// q is query as the database takes it: PostgreSQL numbers its placeholders ($1, $2, ...).
// No statement of the store has a ? inside a string literal.
func (s *sqlStore) q(query string) string {
	if !s.pg {
		return query
	}
	if v, ok := s.rebound.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	out := b.String()
	s.rebound.Store(query, out)
	return out
}

// noLimit is the LIMIT argument that means all rows.
func (s *sqlStore) noLimit() any {
	if s.pg {
		return nil // LIMIT NULL
	}
	return -1
}

// bin is a value for a column that holds text as the caller gave it, byte for byte: the
// JSON columns, errors, tool outputs and approval arguments. PostgreSQL keeps them as bytea,
// since its text type refuses a NUL byte and invalid UTF-8; SQLite keeps TEXT.
func (s *sqlStore) bin(v any) any {
	if !s.pg {
		return v
	}
	switch v := v.(type) {
	case string:
		return []byte(v)
	case sql.NullString:
		if !v.Valid {
			return nil
		}
		return []byte(v.String)
	}
	return v
}

// storable reports whether s can be stored in (and so found in) a text column of either
// database: PostgreSQL's text refuses a NUL byte and invalid UTF-8.
func (s *sqlStore) storable(v string) bool {
	return !s.pg || (utf8.ValidString(v) && !strings.ContainsRune(v, 0))
}

// errNoRunRow is what a write that takes a sequence number from its run's row meets when
// there is no such run; fkErr makes it ErrRunNotFound, as a foreign-key failure is.
var errNoRunRow = errors.New("the run does not exist")

// PostgreSQL error codes the store acts on.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
	pgDeadlock            = "40P01"
	pgSerialization       = "40001"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// PostgreSQL error codes of a session the server ended: its transaction committed
// nothing.
const (
	pgAdminShutdown = "57P01" // pg_terminate_backend, a fast shutdown
	pgIdleInTx      = "25P03" // idle_in_transaction_session_timeout (a stopped process)
)

// retryable reports whether err, met before the batch's COMMIT was sent, lost the whole
// transaction and nothing else: to another one (a deadlock between two processes'
// batches, which PostgreSQL breaks by failing one), or with the session, which the
// server ended (a process stopped past idle_in_transaction_session_timeout, an
// administrator's pg_terminate_backend) or whose connection broke. The batch then runs
// again, on a new connection. A COMMIT that fails is never retried: it may have landed.
func retryable(err error) bool {
	switch pgCode(err) {
	case pgDeadlock, pgSerialization, pgAdminShutdown, pgIdleInTx:
		return true
	case "":
		return pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	}
	return false
}

// takeSeq reserves n sequence numbers of the run (kind "event" or "journal") and returns
// the last one in use before them. They come from a counter on the run's row: the
// transaction's first take for a run is an UPDATE ... RETURNING, whose lock (PostgreSQL's
// row lock, SQLite's database write lock) keeps every other writer of the run, on any
// node, out until commit; later takes in the same transaction count on from the cached
// value (updating one row hundreds of times in a transaction walks ever longer version
// chains on PostgreSQL), and flush writes the counters back before the commit.
func (w *wtx) takeSeq(kind, runID string, n int64) (int64, error) {
	m := w.eventSeq
	if kind == "journal" {
		m = w.doneSeq
	}
	if last, ok := m[runID]; ok {
		m[runID] = last + n
		w.dirty[seqKey{kind, runID}] = true
		return last, nil
	}
	var last int64
	var err error
	if w.s.pg {
		err = w.QueryRow(`UPDATE runs SET `+kind+`_seq = `+kind+`_seq + ? WHERE id = ? RETURNING `+kind+`_seq`,
			n, runID).Scan(&last)
	} else {
		// An older luft still open on the state dir across the upgrade to migration 0005
		// numbers by max()+1 and leaves the counter behind: never take less than that.
		table, col := "events", "seq"
		if kind == "journal" {
			table, col = "journal", "completed_seq"
		}
		err = w.QueryRow(`UPDATE runs SET `+kind+`_seq = MAX(`+kind+`_seq,
			(SELECT COALESCE(MAX(`+col+`), 0) FROM `+table+` WHERE run_id = ?)) + ? WHERE id = ? RETURNING `+kind+`_seq`,
			runID, n, runID).Scan(&last)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errNoRunRow
	}
	if err != nil {
		return 0, err
	}
	m[runID] = last
	return last - n, nil
}

// seqKey names one counter of one run.
type seqKey struct{ kind, runID string }

// flush writes the counters taken from the cache back to their runs' rows.
// It runs before every commit, and after each op of an isolated batch so a savepoint's
// rollback never undoes a counter another op took.
func (w *wtx) flush() error {
	for k := range w.dirty {
		m := w.eventSeq
		if k.kind == "journal" {
			m = w.doneSeq
		}
		if _, err := w.Exec(`UPDATE runs SET `+k.kind+`_seq = ? WHERE id = ?`, m[k.runID], k.runID); err != nil {
			return err
		}
		delete(w.dirty, k)
	}
	return nil
}

// journalSeqChanged is called after entries of the run lost their completed_seq
// (rescheduled or deleted): the next one is again the largest left + 1, on both databases.
func (w *wtx) journalSeqChanged(runID string) error {
	delete(w.doneSeq, runID)
	delete(w.dirty, seqKey{"journal", runID}) // the statement below sets the counter anew
	_, err := w.Exec(`UPDATE runs SET journal_seq = m.v FROM
		(SELECT COALESCE(MAX(completed_seq), 0) AS v FROM journal WHERE run_id = ?) AS m
		WHERE id = ? AND journal_seq <> m.v`, runID, runID)
	return err
}

// rdb is the read pool with the store's placeholders.
type rdb struct{ s *sqlStore }

func (r rdb) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return r.s.r.QueryRowContext(ctx, r.s.q(q), args...)
}

func (r rdb) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return r.s.r.QueryContext(ctx, r.s.q(q), args...)
}
