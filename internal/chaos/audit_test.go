package chaos

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// auditSQL installs, beside luft's tables, the triggers that attribute every write to the
// process that made it (its application_name):
//   - chaos.claims: who created each run (attempt 1), who claimed each later attempt, and
//     who settled a run whose last attempt had stored its end as an event only;
//   - chaos.stale: every write to a run (its row, events, journal, tool calls, approvals,
//     files, phases) by a process other than the claimer of the run's attempt at that
//     moment: a write that landed from a node after it lost the run;
//   - chaos.finishes: every write that leaves a journal entry completed, with what the
//     entry was before (a second one, or one over a completed entry, is a call redone).
//
// A write to the run's row is checked under the row lock the UPDATE holds, so it is exact;
// event appends and journal completions update the row (their per-run counters) in the
// same transaction, so they are checked that way too.
const auditSQL = `
CREATE SCHEMA chaos;
CREATE TABLE chaos.claims (run_id text, attempt bigint, writer text, kind text NOT NULL DEFAULT 'claim',
	at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON chaos.claims (run_id, attempt);
CREATE TABLE chaos.stale (run_id text, tbl text, writer text, owner text, attempt bigint, what text,
	at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE chaos.finishes (run_id text, call_key text, writer text, attempt bigint, prev text,
	at timestamptz NOT NULL DEFAULT clock_timestamp());

CREATE FUNCTION chaos.owner(run text, a bigint) RETURNS text LANGUAGE sql STABLE AS
	'SELECT writer FROM chaos.claims WHERE run_id = run AND attempt = a ORDER BY at DESC LIMIT 1';

CREATE FUNCTION chaos.on_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE me text := current_setting('application_name'); own text;
BEGIN
	IF TG_OP = 'INSERT' OR NEW.attempt IS DISTINCT FROM OLD.attempt THEN
		INSERT INTO chaos.claims (run_id, attempt, writer) VALUES (NEW.id, NEW.attempt, me);
		RETURN NEW;
	END IF;
	own := chaos.owner(NEW.id, OLD.attempt);
	IF own IS DISTINCT FROM me AND OLD.status = 'running' AND NEW.status <> 'running' AND NEW.event_seq = OLD.event_seq
		AND EXISTS (SELECT 1 FROM public.events WHERE run_id = NEW.id AND seq = NEW.event_seq AND type = 'run_done') THEN
		-- A settle: the attempt's process stored its run_done and died before it wrote
		-- the run's end; another process writes that end, comparing the attempt. It
		-- takes the run over without a new attempt.
		INSERT INTO chaos.claims (run_id, attempt, writer, kind) VALUES (NEW.id, NEW.attempt, me, 'settle');
		RETURN NEW;
	END IF;
	IF own IS DISTINCT FROM me THEN
		INSERT INTO chaos.stale (run_id, tbl, writer, owner, attempt, what) VALUES (NEW.id, 'runs', me, own, OLD.attempt,
			format('status %s→%s, event_seq %s→%s, journal_seq %s→%s', OLD.status, NEW.status, OLD.event_seq, NEW.event_seq, OLD.journal_seq, NEW.journal_seq));
	END IF;
	RETURN NEW;
END $$;

CREATE FUNCTION chaos.on_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE me text := current_setting('application_name'); a bigint; own text;
BEGIN
	SELECT attempt INTO a FROM public.runs WHERE id = NEW.run_id;
	own := chaos.owner(NEW.run_id, a);
	IF own IS DISTINCT FROM me THEN
		INSERT INTO chaos.stale (run_id, tbl, writer, owner, attempt, what) VALUES (NEW.run_id, TG_TABLE_NAME, me, own, a, TG_OP);
	END IF;
	RETURN NEW;
END $$;

CREATE FUNCTION chaos.on_journal() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE a bigint; prev text;
BEGIN
	IF NEW.status = 'completed' THEN
		IF TG_OP = 'UPDATE' THEN prev := OLD.status; END IF;
		SELECT attempt INTO a FROM public.runs WHERE id = NEW.run_id;
		INSERT INTO chaos.finishes (run_id, call_key, writer, attempt, prev)
			VALUES (NEW.run_id, NEW.call_key, current_setting('application_name'), a, prev);
	END IF;
	RETURN NEW;
END $$;

CREATE TRIGGER chaos_runs AFTER INSERT OR UPDATE ON public.runs FOR EACH ROW EXECUTE FUNCTION chaos.on_runs();
CREATE TRIGGER chaos_journal AFTER INSERT OR UPDATE ON public.journal FOR EACH ROW EXECUTE FUNCTION chaos.on_journal();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.journal FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.tool_calls FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.approvals FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.files FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
CREATE TRIGGER chaos_w AFTER INSERT OR UPDATE ON public.phases FOR EACH ROW EXECUTE FUNCTION chaos.on_write();
`

// openAudit connects to the database as the test ("chaos_test") and installs auditSQL.
// luft's schema must exist already (open a store on the URL first).
func openAudit(t *testing.T, dbURL string) *sql.DB {
	t.Helper()
	cc, err := pgx.ParseConfig(withParam(t, dbURL, "application_name", "chaos_test"))
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cc)
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), auditSQL); err != nil {
		t.Fatalf("install the audit triggers: %v", err)
	}
	return db
}

type claim struct {
	run     string
	attempt int
	writer  string
	kind    string // claim or settle
	at      time.Time
}

func claims(t *testing.T, db *sql.DB) []claim {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT run_id, attempt, writer, kind, at FROM chaos.claims ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []claim
	for rows.Next() {
		var c claim
		if err := rows.Scan(&c.run, &c.attempt, &c.writer, &c.kind, &c.at); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type staleWrite struct {
	run, tbl, writer, owner, what string
	attempt                       int
	at                            time.Time
}

func staleWrites(t *testing.T, db *sql.DB) []staleWrite {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT run_id, tbl, writer, coalesce(owner, ''), attempt, what, at FROM chaos.stale ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []staleWrite
	for rows.Next() {
		var s staleWrite
		if err := rows.Scan(&s.run, &s.tbl, &s.writer, &s.owner, &s.attempt, &s.what, &s.at); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type finish struct {
	run, key, writer, prev string
	attempt                int
	at                     time.Time
}

func finishes(t *testing.T, db *sql.DB) []finish {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT run_id, call_key, writer, attempt, coalesce(prev, ''), at FROM chaos.finishes ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []finish
	for rows.Next() {
		var f finish
		if err := rows.Scan(&f.run, &f.key, &f.writer, &f.attempt, &f.prev, &f.at); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
