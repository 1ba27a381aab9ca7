// Package storage keeps what a run leaves behind: the run itself, its ordered event
// stream, the phases projected from it, the files it pinned and the journal of its effects,
// so a killed run resumes without redoing finished calls (SPEC §4–5, DESIGN decisions 2, 4
// and 6).
//
// The runtime consumes two interfaces defined here: EventLog (append and read a run's
// events) and Store (EventLog plus runs, phases, files and the journal). SQLite and Postgres
// implement both durably, and answer every call alike (one contract test suite runs on
// both); OpenURL opens the one a storage URL names (SPEC §9) as a DB.
//
// # Tables
//
// SQLite keeps one database, <state-dir>/luft.db, with STRICT tables:
//
//   - runs: one row per run (id is a UUIDv7 string): workflow, script hash, status (queued,
//     running, completed, failed, cancelled, suspended), error, args, report, token usage,
//     cost, agent counts (ok, failed, cached, cancelled; the runtime keeps them and the
//     usage up to date while the run goes on), attempt, pid, timestamps, resume_after,
//     cancel_requested and spec_json (whatever the runtime needs to resume).
//   - events: (run_id, seq) → ts, type, data_json. data_json holds the event's fields as
//     a JSON object with sorted keys, so an event read back marshals exactly as it did when
//     appended (numbers come back as float64, as event.Event.UnmarshalJSON gives them).
//   - journal: (run_id, call_key) → kind, input_hash, status (scheduled, completed,
//     failed), result_json, error, usage, cost, attempts, completed_seq, where_pos.
//     completed_seq is the run's completion order (previous maximum + 1), unique per run.
//     Both it and events.seq are taken from counters on the run's row (event_seq,
//     journal_seq), not from max()+1: see the PostgreSQL section.
//   - phases: (run_id, phase_id) → label, planned, description, status, ok, failed,
//     cancelled, started_at, done_at; written by Append, in the same transaction, from phase_started and
//     phase_done events.
//   - files: (run_id, path) → sha256, content: the pinned script and the files it loaded.
//   - tool_calls: (run_id, call_key, conversation, turn, tool_call_id) → name, args_hash,
//     status (started, done), output: the tool calls of an agent call, so a retried or
//     resumed call replays a tool's output instead of running it again. Rows belong to
//     their journal entry (ON DELETE CASCADE), so rerunning from a divergence drops them.
//
// Every child table references runs with ON DELETE CASCADE: create a run before writing
// anything for it (writes for an unknown run fail with ErrRunNotFound). Times are stored as
// UTC RFC 3339 text with nine fractional digits, so they sort as text.
//
// Migrations are numbered files in migrations/ (embedded), applied in one BEGIN IMMEDIATE
// transaction and recorded in schema_migrations, so concurrent first opens apply them
// once. A database from a newer luft is refused (ErrSchemaTooNew); a file that is not a
// SQLite database, a schema with tables or columns missing, pages found malformed by any
// later read or write, or a luft.db of zero bytes beside a runs/ folder with runs or a
// non-empty -wal (truncated, not new) give a *CorruptError (ErrCorruptState) naming the
// file and asking the user to move it aside. A write or read the disk refuses (SQLite's
// full, I/O, read-only and cannot-open errors; ENOSPC, EDQUOT, EFBIG, EROFS, EIO) gives an
// *UnwritableError (ErrUnwritable) naming the state dir and what to do; Broken tells both
// apart from a refused operation. Nothing here ever deletes a database.
//
// # Connections
//
// Settings live in the DSN, so every connection gets them: busy_timeout 5000, WAL,
// synchronous NORMAL, foreign keys, and BEGIN IMMEDIATE for write transactions (lock waits
// then go through busy_timeout instead of failing mid-transaction). There is one writer
// connection (SetMaxOpenConns(1)), used only by the writer goroutine, and a separate pool
// of query_only connections for every read. Several processes may open the same state dir
// at once: SQLite's file locks serialise their writers and WAL lets readers run beside
// them. The writer connection does not checkpoint (wal_autocheckpoint 0): a goroutine of
// the store's own runs PASSIVE checkpoints on a connection of its own, at most every
// 200 ms while writes go on, so no commit waits for the WAL to be copied into luft.db.
//
// # Group commit
//
// Every write is an operation queued to the writer goroutine. It takes whatever is queued
// (up to 256 operations, plus any that queue while it waits for the database lock), runs
// them in one transaction, commits, and only then releases each caller with its own
// result. So a call that returns nil is durable (modulo power loss under synchronous
// NORMAL, which can lose the last commits but never corrupts), and 1000 concurrent calls
// cost a handful of commits instead of 1000. One failing operation does not fail the
// others: the batch is rolled back and run again with each operation in its own SAVEPOINT.
// A caller's context stops it waiting to be queued and drops an operation that has not
// started; an operation that has started is always waited for. Callers that write one
// after another from a single goroutine get one transaction each; AppendAsync lets an
// ordered emitter queue under its lock and wait outside it; RecordRun makes a run's
// creation, events and row update one operation, so one commit. Stats reports the writer's
// counters. After Close (which commits what is queued) every call fails with ErrClosed.
// # PostgreSQL
//
// Postgres is the same store on a PostgreSQL server (pgx through database/sql), for several
// luft processes sharing runs: the same tables, statements, writer goroutine and group
// commit, with these differences (dialect.go, migrations_pg):
//
//   - Migrations are migrations_pg/NNNN_name.sql, applied in one transaction that holds
//     pg_advisory_xact_lock, so concurrent first opens on many machines apply them once.
//   - The JSON columns, errors, tool outputs, approval arguments and the text a script or
//     a model chooses (workflow path, phase labels, script positions, file paths, tool
//     names and tool call ids) are bytea, so they come back byte for byte (text refuses
//     NUL and invalid UTF-8; jsonb reorders keys).
//     Keys and times are text COLLATE "C", so ordering and the id-prefix range scan follow
//     bytes as SQLite's do; times are the same fixed-width text.
//   - events.seq and journal.completed_seq come, on both stores, from counters on the runs
//     row (event_seq, journal_seq; SQLite's migration 0005 starts them from what a run
//     holds): a transaction's first take for a run is UPDATE ... RETURNING, whose row lock
//     (SQLite: the database's write lock) serialises the run's writers on every node until
//     commit; later takes in it count on from the cached value, written back before the
//     commit. When entries lose their completed_seq (rescheduled, invalidated) the counter
//     drops to the largest left, so the next is the largest + 1, as before the counters.
//     SQLite's first take also never goes below the largest stored value, for an older
//     luft still writing by max()+1 across the upgrade.
//   - A batch that loses a deadlock to another process's batch runs again, and so does
//     one whose session the server ended or whose connection broke before its COMMIT
//     (a process stopped past idle_in_transaction_session_timeout wakes to a closed
//     session): it committed nothing, and runs again on a new connection. A failed
//     COMMIT is never run again. A unique violation on create is ErrRunExists; ids
//     text cannot hold are runs not found.
//   - RequestCancel and DecideApproval NOTIFY channel luft_runs ("cancel RUN",
//     "approval RUN APPROVAL") in their own transaction, so the notice goes out only if
//     the write commits. Postgres.Notices delivers them on one LISTEN connection per
//     store (application_name "luft notices"), opened with the first subscriber, pinged
//     every 10 s and reconnected with a backoff from 100 ms to 5 s; each time it is
//     (back) up its subscribers get a NoticeResync, since notices sent while it was down
//     are lost. Notices are hints: the rows stay the record, and the runtime still polls.
//
// # Fencing
//
// WithFence(ctx, run, attempt) makes a context's writes for that run check, in the write's
// own transaction, that the run is still at the attempt its process claimed (the epoch;
// a claim is UpdateRun with IfAttempt), and fail with ErrOwnershipLost otherwise: journal,
// events, tool calls, approvals, pinned files and the run's own updates, on both stores.
// On PostgreSQL the check locks the run's row until commit, so no claim slips between the
// check and the write. The runtime fences every write of a run it holds under a lease
// (runtime/lease.go).
//
// # Shared budgets
//
// On PostgreSQL, TakeBudget, GiveBudget and LowerBudget (budgets.go) keep the rate-limit
// budgets the nodes share, one row of the UNLOGGED table budgets per provider key, on
// connections of their own. A row has four levels (requests, tokens, and Anthropic's
// input and output tokens), each with its limit, level, refill rate (and whether a node
// measured it or guessed limit per minute) and, for a fixed window, the window's end.
// Each statement is one UPDATE that materialises every level at the server's now().
//
// With PostgreSQL the state dir holds no luft.db: only the runs/ folder, the daemon's files
// and logs.
package storage
