-- 0001: runs, their events, the journal of effects, the phases projection and pinned files.
-- Times are UTC text in a fixed-width RFC 3339 form, so they sort as strings.

CREATE TABLE runs (
    id               TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
    workflow         TEXT    NOT NULL DEFAULT '',
    script_hash      TEXT    NOT NULL DEFAULT '',
    status           TEXT    NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'suspended')),
    error            TEXT    NOT NULL DEFAULT '',
    args_json        TEXT,
    report_json      TEXT,
    has_report       INTEGER NOT NULL DEFAULT 0 CHECK (has_report IN (0, 1)),
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    cached_tokens    INTEGER NOT NULL DEFAULT 0,
    cost             REAL    NOT NULL DEFAULT 0,
    agents_ok        INTEGER NOT NULL DEFAULT 0,
    agents_failed    INTEGER NOT NULL DEFAULT 0,
    agents_cached    INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 1,
    pid              INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    finished_at      TEXT,
    resume_after     TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    spec_json        TEXT
) STRICT;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);

CREATE TABLE events (
    run_id    TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL CHECK (seq > 0),
    ts        TEXT    NOT NULL,
    type      TEXT    NOT NULL CHECK (type <> ''),
    data_json TEXT    NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE TABLE journal (
    run_id        TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    call_key      TEXT    NOT NULL CHECK (call_key <> ''),
    kind          TEXT    NOT NULL DEFAULT '',
    input_hash    TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL CHECK (status IN ('scheduled', 'completed', 'failed')),
    result_json   TEXT,
    error         TEXT    NOT NULL DEFAULT '',
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    cost          REAL    NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    -- NULL while scheduled; the run's completion order once completed or failed.
    completed_seq INTEGER CHECK ((status = 'scheduled') = (completed_seq IS NULL)),
    where_pos     TEXT    NOT NULL DEFAULT '',
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    PRIMARY KEY (run_id, call_key)
) STRICT;

-- NULLs are distinct in a SQLite unique index, so scheduled rows do not collide.
CREATE UNIQUE INDEX journal_by_completed_seq ON journal (run_id, completed_seq);

CREATE TABLE phases (
    run_id      TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    phase_id    INTEGER NOT NULL,
    label       TEXT    NOT NULL DEFAULT '',
    planned     INTEGER NOT NULL DEFAULT 0,
    description TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL CHECK (status IN ('running', 'done')),
    ok          INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    started_at  TEXT,
    done_at     TEXT,
    PRIMARY KEY (run_id, phase_id)
) STRICT;

CREATE TABLE files (
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    path       TEXT NOT NULL CHECK (path <> ''),
    sha256     TEXT NOT NULL,
    content    BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, path)
) STRICT;
