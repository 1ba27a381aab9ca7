-- 0003: the rate-limit budgets that the daemons on one database share, one row per
-- provider key (the key column is a hash of the lane and its endpoint, never the API key
-- itself). UNLOGGED: a budget needs no durability; after a server crash the table is
-- empty, and the nodes learn the limits again (one node scouts).
-- Levels are as of at (the server's clock) and refill continuously at the rate the nodes
-- learned from the provider's headers (per second; 0 = limit/60, a limit per minute).
-- A limit of 0 = not known yet.

CREATE UNLOGGED TABLE budgets (
    key         text COLLATE "C" NOT NULL PRIMARY KEY,
    req_limit   double precision NOT NULL DEFAULT 0,
    req_level   double precision NOT NULL DEFAULT 0,
    tok_limit   double precision NOT NULL DEFAULT 0,
    tok_level   double precision NOT NULL DEFAULT 0,
    req_rate    double precision NOT NULL DEFAULT 0,
    tok_rate    double precision NOT NULL DEFAULT 0,
    at          timestamptz      NOT NULL DEFAULT now(),
    scout       text COLLATE "C" NOT NULL DEFAULT '',
    scout_until timestamptz      NOT NULL DEFAULT now(),
    req_got     double precision NOT NULL DEFAULT 0,
    tok_got     double precision NOT NULL DEFAULT 0
);
