-- Whether a session still has a run that holds it (queued, running or
-- awaiting an approval), asked when a run is queued on a session that may
-- have expired: without this index the question read the whole runs table,
-- which keeps every ended run for --retain.
CREATE INDEX runs_held_by_session ON runs (agent, session_id)
    WHERE status IN ('pending', 'running', 'awaiting_approval');
