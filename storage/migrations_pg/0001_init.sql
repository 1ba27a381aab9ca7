-- 0001: the schema of SQLite's migrations 0001-0004 (runs, events, journal, phases, files,
-- tool_calls, approvals), on PostgreSQL. Differences, all so the store behaves as SQLite's:
--   - text keys and times are COLLATE "C": they sort byte by byte, as in SQLite, so
--     ORDER BY, the id-prefix range scan and time comparisons give the same answers.
--   - the JSON columns, errors, tool outputs, approval arguments and the text a script
--     or a model chooses (the workflow's path, phase labels and descriptions, script
--     positions, file paths, tool names and tool call ids) are bytea: they come back byte
--     for byte (text refuses a NUL byte and invalid UTF-8; jsonb reorders keys), and sort
--     byte by byte.
--   - times are UTC text in the fixed-width RFC 3339 form, nanoseconds kept.
--   - runs.event_seq and runs.journal_seq are the per-run counters events.seq and
--     journal.completed_seq are taken from (UPDATE ... RETURNING, under the run's row lock),
--     so writers on several nodes never collide.

CREATE TABLE runs (
    id               text COLLATE "C" NOT NULL PRIMARY KEY CHECK (id <> ''),
    workflow         bytea   NOT NULL DEFAULT '',
    script_hash      text    NOT NULL DEFAULT '',
    status           text COLLATE "C" NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'suspended')),
    error            bytea   NOT NULL DEFAULT '',
    args_json        bytea,
    report_json      bytea,
    has_report       boolean NOT NULL DEFAULT false,
    input_tokens     bigint  NOT NULL DEFAULT 0,
    output_tokens    bigint  NOT NULL DEFAULT 0,
    cached_tokens    bigint  NOT NULL DEFAULT 0,
    cost             double precision NOT NULL DEFAULT 0,
    agents_ok        bigint  NOT NULL DEFAULT 0,
    agents_failed    bigint  NOT NULL DEFAULT 0,
    agents_cached    bigint  NOT NULL DEFAULT 0,
    agents_cancelled bigint  NOT NULL DEFAULT 0,
    attempt          bigint  NOT NULL DEFAULT 1,
    pid              bigint  NOT NULL DEFAULT 0,
    created_at       text COLLATE "C" NOT NULL,
    updated_at       text COLLATE "C" NOT NULL,
    finished_at      text COLLATE "C",
    resume_after     text COLLATE "C",
    cancel_requested boolean NOT NULL DEFAULT false,
    spec_json        bytea,
    event_seq        bigint  NOT NULL DEFAULT 0,
    journal_seq      bigint  NOT NULL DEFAULT 0
);

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);

CREATE TABLE events (
    run_id    text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq       bigint NOT NULL CHECK (seq > 0),
    ts        text COLLATE "C" NOT NULL,
    type      text COLLATE "C" NOT NULL CHECK (type <> ''),
    data_json bytea  NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE journal (
    run_id        text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    call_key      text COLLATE "C" NOT NULL CHECK (call_key <> ''),
    kind          text    NOT NULL DEFAULT '',
    input_hash    text    NOT NULL DEFAULT '',
    status        text COLLATE "C" NOT NULL CHECK (status IN ('scheduled', 'completed', 'failed')),
    result_json   bytea,
    error         bytea   NOT NULL DEFAULT '',
    input_tokens  bigint  NOT NULL DEFAULT 0,
    output_tokens bigint  NOT NULL DEFAULT 0,
    cached_tokens bigint  NOT NULL DEFAULT 0,
    cost          double precision NOT NULL DEFAULT 0,
    attempts      bigint  NOT NULL DEFAULT 0,
    -- NULL while scheduled; the run's completion order once completed or failed.
    completed_seq bigint CHECK ((status = 'scheduled') = (completed_seq IS NULL)),
    where_pos     bytea   NOT NULL DEFAULT '',
    created_at    text COLLATE "C" NOT NULL,
    updated_at    text COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, call_key)
);

-- NULLs are distinct in a unique index, so scheduled rows do not collide.
CREATE UNIQUE INDEX journal_by_completed_seq ON journal (run_id, completed_seq);

CREATE TABLE phases (
    run_id      text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    phase_id    bigint NOT NULL,
    label       bytea  NOT NULL DEFAULT '',
    planned     bigint NOT NULL DEFAULT 0,
    description bytea  NOT NULL DEFAULT '',
    status      text COLLATE "C" NOT NULL CHECK (status IN ('running', 'done')),
    ok          bigint NOT NULL DEFAULT 0,
    failed      bigint NOT NULL DEFAULT 0,
    cancelled   bigint NOT NULL DEFAULT 0,
    started_at  text COLLATE "C",
    done_at     text COLLATE "C",
    PRIMARY KEY (run_id, phase_id)
);

CREATE TABLE files (
    run_id     text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    path       bytea NOT NULL CHECK (path <> ''),
    sha256     text  NOT NULL,
    content    bytea NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, path)
);

CREATE TABLE tool_calls (
    run_id       text COLLATE "C" NOT NULL,
    call_key     text COLLATE "C" NOT NULL,
    conversation text COLLATE "C" NOT NULL,
    turn         bigint NOT NULL CHECK (turn > 0),
    tool_call_id bytea  NOT NULL,
    name         bytea  NOT NULL,
    args_hash    text   NOT NULL,
    status       text COLLATE "C" NOT NULL CHECK (status IN ('started', 'done')),
    output       bytea,
    created_at   text COLLATE "C" NOT NULL,
    updated_at   text COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, call_key, conversation, turn, tool_call_id),
    FOREIGN KEY (run_id, call_key) REFERENCES journal (run_id, call_key) ON DELETE CASCADE
);

CREATE TABLE approvals (
    run_id       text COLLATE "C" NOT NULL,
    id           text COLLATE "C" NOT NULL,
    call_key     text COLLATE "C" NOT NULL,
    conversation text COLLATE "C" NOT NULL,
    turn         bigint NOT NULL CHECK (turn > 0),
    tool_call_id bytea  NOT NULL,
    tool         bytea  NOT NULL,
    arguments    bytea  NOT NULL,
    args_hash    text   NOT NULL,
    status       text COLLATE "C" NOT NULL CHECK (status IN ('pending', 'allowed', 'declined')),
    created_at   text COLLATE "C" NOT NULL,
    decided_at   text COLLATE "C",
    PRIMARY KEY (run_id, id),
    UNIQUE (run_id, call_key, conversation, turn, tool_call_id),
    FOREIGN KEY (run_id, call_key) REFERENCES journal (run_id, call_key) ON DELETE CASCADE
);

CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending';
