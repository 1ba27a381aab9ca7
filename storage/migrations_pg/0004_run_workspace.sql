-- 0004: the workspace a run needs, as SQLite's 0007. A run whose agents use local tools or
-- an ACP coding agent records the workspace it works in ('' = none: the run only calls APIs
-- and any node may take it over); only a node that serves that workspace takes it over.
-- It touches nothing another migration makes, so it applies with or without 0003.

ALTER TABLE runs ADD COLUMN workspace text COLLATE "C" NOT NULL DEFAULT '';
