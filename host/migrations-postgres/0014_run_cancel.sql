-- A caller asked the run to stop (when, ms): whoever executes it ends it as
-- canceled (status 'failed', error code 'canceled') at its next step; one
-- that nobody executes (queued, waiting for a human, left by a dead host)
-- ends so when its worker reaches it.
ALTER TABLE runs ADD COLUMN cancel_requested_at BIGINT;
-- A session's runs, newest first, a page at a time (GET /api/agents/{name}/runs?sessionId=).
CREATE INDEX runs_by_session ON runs (agent, session_id, seq);
