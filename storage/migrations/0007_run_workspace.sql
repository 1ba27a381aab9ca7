-- 0007: the workspace a run needs. A run whose agents use local tools or an ACP coding
-- agent records the workspace it works in ('' = none: the run only calls APIs and any node
-- may take it over); only a node that serves that workspace takes it over.

ALTER TABLE runs ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
