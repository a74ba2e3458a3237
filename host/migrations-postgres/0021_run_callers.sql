-- Who started a run, when a host's endpoint keys say: the id of the invoke
-- key (a digest, never the key), so that a key sees the runs it started
-- and no other caller's. NULL: started without a key (a host without keys,
-- an admin key, an orchestration, an Agent Framework session).
ALTER TABLE runs ADD COLUMN caller TEXT;
CREATE INDEX runs_by_caller ON runs (agent, caller, seq) WHERE caller IS NOT NULL;
