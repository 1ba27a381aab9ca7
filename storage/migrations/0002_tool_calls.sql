-- 0002: the tool calls an agent call's model asked for, so a retried or resumed agent call
-- replays a tool's result instead of running the tool (write_file, run_command) again.
-- A row belongs to its journal entry: rerunning from a divergence, which deletes the
-- entry, deletes its tool calls too.

CREATE TABLE tool_calls (
    run_id       TEXT    NOT NULL,
    call_key     TEXT    NOT NULL,
    -- the hash of the request that began the conversation: the agent call's input hash,
    -- or a schema re-prompt's, so each conversation of a call numbers its turns anew.
    conversation TEXT    NOT NULL,
    turn         INTEGER NOT NULL CHECK (turn > 0),
    tool_call_id TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    args_hash    TEXT    NOT NULL,
    -- started: the tool was begun and never finished (the process stopped, or the call
    -- was cancelled, while it ran); done: output holds what the model was given.
    status       TEXT    NOT NULL CHECK (status IN ('started', 'done')),
    output       TEXT,
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    PRIMARY KEY (run_id, call_key, conversation, turn, tool_call_id),
    FOREIGN KEY (run_id, call_key) REFERENCES journal (run_id, call_key) ON DELETE CASCADE
) STRICT;
