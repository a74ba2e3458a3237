-- An instance started for later (the Durable Task protocol's
-- `scheduledStartTimestamp`, an entity's start "at"): it stays Pending and
-- runs no episode before `start_at` (Unix ms; NULL: at once). The index
-- holds only instances still waiting for their time, for the scheduler's
-- "what is due next" and its pass.
ALTER TABLE instances ADD COLUMN start_at BIGINT;
CREATE INDEX instances_scheduled ON instances (start_at) WHERE start_at IS NOT NULL AND status = 'Pending';
