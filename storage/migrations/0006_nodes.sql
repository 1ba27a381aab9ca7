-- 0006: nodes and leases. Each daemon is a node (nodes: its address and heartbeat); a run
-- records the node that drives it and, when that node holds it under a lease, when the
-- lease ends. Whether a lease has lapsed is decided on the run's row alone.

ALTER TABLE runs ADD COLUMN node TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until TEXT;

CREATE TABLE nodes (
    id           TEXT NOT NULL PRIMARY KEY CHECK (id <> ''),
    address      TEXT NOT NULL DEFAULT '',
    pid          INTEGER NOT NULL DEFAULT 0,
    started_at   TEXT NOT NULL,
    heartbeat_at TEXT NOT NULL
) STRICT;
