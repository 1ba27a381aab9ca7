-- 0005: the shared budgets also hold Anthropic's separate input- and output-token
-- buckets (in_*, out_*), beside requests (req_*) and one token bucket (tok_*); and,
-- for each of the four levels:
--   *_learned: its rate was measured from readings (a node that has only seen the
--              limit guesses limit/60 and never overwrites a measured rate);
--   *_reset:   a fixed window's end (NULL = the level refills continuously): nothing
--              refills before it, and then all of it; windows are taken to last a
--              minute until a reading reports the next end.

ALTER TABLE budgets
    ADD COLUMN in_limit    double precision NOT NULL DEFAULT 0,
    ADD COLUMN in_level    double precision NOT NULL DEFAULT 0,
    ADD COLUMN in_rate     double precision NOT NULL DEFAULT 0,
    ADD COLUMN in_got      double precision NOT NULL DEFAULT 0,
    ADD COLUMN out_limit   double precision NOT NULL DEFAULT 0,
    ADD COLUMN out_level   double precision NOT NULL DEFAULT 0,
    ADD COLUMN out_rate    double precision NOT NULL DEFAULT 0,
    ADD COLUMN out_got     double precision NOT NULL DEFAULT 0,
    ADD COLUMN req_learned boolean NOT NULL DEFAULT false,
    ADD COLUMN tok_learned boolean NOT NULL DEFAULT false,
    ADD COLUMN in_learned  boolean NOT NULL DEFAULT false,
    ADD COLUMN out_learned boolean NOT NULL DEFAULT false,
    ADD COLUMN req_reset   timestamptz,
    ADD COLUMN tok_reset   timestamptz,
    ADD COLUMN in_reset    timestamptz,
    ADD COLUMN out_reset   timestamptz;
