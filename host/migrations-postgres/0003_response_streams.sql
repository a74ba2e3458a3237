-- Response streams (the embedded backend): each run's output, chunk by
-- chunk, keyed by its correlation id, until it expires. The id orders the
-- entries and is the cursor a reader resumes from.
CREATE TABLE stream_entries (
    id             BIGSERIAL PRIMARY KEY,
    correlation_id TEXT   NOT NULL,
    kind           TEXT   NOT NULL CHECK (kind IN ('chunk', 'complete', 'failed')),
    data           TEXT   NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL
);
CREATE INDEX stream_entries_by_run ON stream_entries (correlation_id, id);
CREATE INDEX stream_entries_by_expiry ON stream_entries (expires_at);
