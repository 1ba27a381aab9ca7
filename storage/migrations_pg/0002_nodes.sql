-- 0002: nodes and leases, as SQLite's 0006. Each daemon is a node (nodes: its address and
-- heartbeat); a run records the node that drives it and, when that node holds it under a
-- lease, when the lease ends. Whether a lease has lapsed is decided on the run's row alone.

ALTER TABLE runs ADD COLUMN node text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until text COLLATE "C";

CREATE INDEX runs_by_lease ON runs (status, lease_until);

CREATE TABLE nodes (
    id           text COLLATE "C" NOT NULL PRIMARY KEY CHECK (id <> ''),
    address      text   NOT NULL DEFAULT '',
    pid          bigint NOT NULL DEFAULT 0,
    started_at   text COLLATE "C" NOT NULL,
    heartbeat_at text COLLATE "C" NOT NULL
);
