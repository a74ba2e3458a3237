-- The PostgreSQL schema of one task hub (the migration runs inside the hub's
-- own schema, see store/hub.rs). Times are Unix milliseconds (UTC). Same
-- tables and meaning as the SQLite migrations, in their final shape.

CREATE TABLE sessions (
    agent          TEXT   NOT NULL,
    id             TEXT   NOT NULL,
    created_at     BIGINT NOT NULL,
    last_active_at BIGINT NOT NULL,
    PRIMARY KEY (agent, id)
);

CREATE TABLE messages (
    agent          TEXT   NOT NULL,
    session_id     TEXT   NOT NULL,
    seq            BIGINT NOT NULL,
    correlation_id TEXT   NOT NULL,
    body           TEXT   NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (agent, session_id, seq)
);

CREATE TABLE runs (
    seq             BIGSERIAL PRIMARY KEY,
    correlation_id  TEXT   NOT NULL UNIQUE,
    agent           TEXT   NOT NULL,
    session_id      TEXT   NOT NULL,
    message         TEXT   NOT NULL,
    response_format TEXT,
    status          TEXT   NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    response        TEXT,
    error           TEXT,
    error_code      TEXT,
    usage           TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX runs_unfinished ON runs (agent, session_id, seq) WHERE status IN ('pending', 'running');

CREATE TABLE instances (
    id               TEXT   PRIMARY KEY,
    name             TEXT   NOT NULL,
    status           TEXT   NOT NULL,
    input            TEXT   NOT NULL,
    output           TEXT,
    custom_status    TEXT,
    component_digest TEXT   NOT NULL,
    parent_id        TEXT,
    parent_execution BIGINT,
    parent_task      BIGINT,
    execution        BIGINT NOT NULL,
    history_events   BIGINT NOT NULL DEFAULT 0,
    history_bytes    BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX instances_by_status ON instances (status, created_at);
CREATE INDEX instances_by_created ON instances (created_at, id);

-- Execution numbers come from one sequence: never reused, even after a purge.
CREATE TABLE executions (
    id          BIGSERIAL PRIMARY KEY,
    instance_id TEXT NOT NULL
);
CREATE INDEX executions_by_instance ON executions (instance_id);

CREATE TABLE journal (
    instance_id TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    entry       TEXT   NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

CREATE TABLE inbox (
    id          BIGSERIAL PRIMARY KEY,
    instance_id TEXT   NOT NULL,
    execution   BIGINT NOT NULL,
    event       TEXT   NOT NULL,
    visible_at  BIGINT NOT NULL
);
CREATE INDEX inbox_by_instance ON inbox (instance_id, visible_at);
CREATE INDEX inbox_by_time ON inbox (visible_at);

CREATE TABLE tasks (
    instance_id TEXT   NOT NULL,
    execution   BIGINT NOT NULL,
    task        BIGINT NOT NULL,
    call        TEXT   NOT NULL,
    attempt     BIGINT NOT NULL DEFAULT 0,
    due_at      BIGINT NOT NULL,
    PRIMARY KEY (instance_id, execution, task)
);
CREATE INDEX tasks_by_due ON tasks (due_at);

CREATE TABLE component_versions (
    digest    TEXT   PRIMARY KEY,
    name      TEXT   NOT NULL,
    wasm      BYTEA  NOT NULL,
    grants    TEXT,
    stored_at BIGINT NOT NULL
);
