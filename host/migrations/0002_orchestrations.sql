-- Durable orchestrations: instances, their journals, inboxes and pending tasks.

CREATE TABLE instances (
    id               TEXT    PRIMARY KEY,
    name             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    input            TEXT    NOT NULL,
    output           TEXT,
    custom_status    TEXT,
    component_digest TEXT    NOT NULL,
    parent_id        TEXT,
    parent_task      INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX instances_by_status ON instances (status, created_at);
CREATE INDEX instances_by_created ON instances (created_at, id);

-- Calls the code made and events that reached it; `seq` orders both.
CREATE TABLE journal (
    instance_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    entry       TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

-- Events not yet seen by the code. A durable timer is a row that becomes
-- visible at its firing time.
CREATE TABLE inbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT    NOT NULL,
    event       TEXT    NOT NULL,
    visible_at  INTEGER NOT NULL
);
CREATE INDEX inbox_by_instance ON inbox (instance_id, visible_at);
CREATE INDEX inbox_by_time ON inbox (visible_at);

-- Agent calls and activities scheduled and not yet finished.
CREATE TABLE tasks (
    instance_id TEXT    NOT NULL,
    task        INTEGER NOT NULL,
    call        TEXT    NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    due_at      INTEGER NOT NULL,
    PRIMARY KEY (instance_id, task)
);
CREATE INDEX tasks_by_due ON tasks (due_at);
