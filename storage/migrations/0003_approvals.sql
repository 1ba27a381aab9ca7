-- 0003: approvals of destructive tool calls under [tools] approval = "ask". A row is
-- written when a call parks for an answer and updated once with the answer, so an
-- answered call is never asked again and an unanswered one is asked again after a
-- restart. Like tool_calls, a row belongs to its journal entry.

CREATE TABLE approvals (
    run_id       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    call_key     TEXT    NOT NULL,
    conversation TEXT    NOT NULL,
    turn         INTEGER NOT NULL CHECK (turn > 0),
    tool_call_id TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    -- the arguments as the model sent them, cut to 64 KiB for display; args_hash is of
    -- the whole text.
    arguments    TEXT    NOT NULL,
    args_hash    TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'allowed', 'declined')),
    created_at   TEXT    NOT NULL,
    decided_at   TEXT,
    PRIMARY KEY (run_id, id),
    UNIQUE (run_id, call_key, conversation, turn, tool_call_id),
    FOREIGN KEY (run_id, call_key) REFERENCES journal (run_id, call_key) ON DELETE CASCADE
) STRICT;

CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending';
