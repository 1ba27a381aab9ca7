-- 0004: agent calls cut off by a cancel (q, Ctrl-C, luft cancel, a timeout) are counted
-- apart from failed ones, so a cancelled run's totals say what happened.

ALTER TABLE runs ADD COLUMN agents_cancelled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE phases ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;
