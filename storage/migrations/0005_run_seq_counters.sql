-- 0005: per-run counters that events.seq and journal.completed_seq are taken from, as on
-- PostgreSQL (UPDATE ... RETURNING under the write transaction), instead of the largest
-- stored value + 1. Existing runs start from what they hold.

ALTER TABLE runs ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN journal_seq INTEGER NOT NULL DEFAULT 0;

UPDATE runs SET
    event_seq = (SELECT COALESCE(MAX(seq), 0) FROM events WHERE events.run_id = runs.id),
    journal_seq = (SELECT COALESCE(MAX(completed_seq), 0) FROM journal WHERE journal.run_id = runs.id);
