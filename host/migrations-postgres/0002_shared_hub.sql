-- Several hosts on one task hub. Each process that joins the hub has a row
-- here, renewed while it lives; an instance, a session or a task is owned by
-- at most one host (its `owner`), and whatever a host whose lease expired
-- owned is taken over by the others. Lease times are the database's clock
-- (milliseconds), so hosts with skewed clocks still agree on expiry.

CREATE TABLE hosts (
    id         TEXT   PRIMARY KEY,
    role       TEXT   NOT NULL,
    started_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

ALTER TABLE instances ADD COLUMN owner TEXT;
ALTER TABLE sessions ADD COLUMN owner TEXT;
ALTER TABLE tasks ADD COLUMN owner TEXT;
CREATE INDEX instances_by_owner ON instances (owner);
CREATE INDEX sessions_by_owner ON sessions (owner);
CREATE INDEX tasks_by_owner ON tasks (owner);
