-- Conversations (sessions), their messages in order, and agent runs.
-- Times are Unix milliseconds (UTC).

CREATE TABLE sessions (
    agent          TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    PRIMARY KEY (agent, id)
);

-- One row per chat message, in the OpenAI wire shape (JSON), numbered per session.
CREATE TABLE messages (
    agent          TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    correlation_id TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (agent, session_id, seq)
);

-- A run is stored before it executes; `seq` is the arrival order.
CREATE TABLE runs (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    correlation_id  TEXT    NOT NULL UNIQUE,
    agent           TEXT    NOT NULL,
    session_id      TEXT    NOT NULL,
    message         TEXT    NOT NULL,
    response_format TEXT,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    response        TEXT,
    error           TEXT,
    error_code      TEXT,
    usage           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX runs_unfinished ON runs (agent, session_id, seq) WHERE status IN ('pending', 'running');
