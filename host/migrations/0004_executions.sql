-- Engine v2: every instance has executions. Execution numbers come from one
-- AUTOINCREMENT sequence, so they are never reused, even after a purge: a
-- result, timer or event addressed to an older execution can never be taken
-- for a newer one's.

CREATE TABLE executions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT    NOT NULL
);
CREATE INDEX executions_by_instance ON executions (instance_id);
INSERT INTO executions (instance_id) SELECT id FROM instances ORDER BY created_at;

ALTER TABLE instances ADD COLUMN execution INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN parent_execution INTEGER;
-- Rows and bytes of the current execution's journal (the history limits).
ALTER TABLE instances ADD COLUMN history_events INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN history_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE instances SET execution = (SELECT MAX(e.id) FROM executions e WHERE e.instance_id = instances.id);
UPDATE instances SET parent_execution = (SELECT p.execution FROM instances p WHERE p.id = instances.parent_id)
    WHERE parent_id IS NOT NULL;
UPDATE instances SET
    history_events = (SELECT COUNT(*) FROM journal j WHERE j.instance_id = instances.id),
    history_bytes = (SELECT COALESCE(SUM(LENGTH(entry)), 0) FROM journal j WHERE j.instance_id = instances.id);

ALTER TABLE inbox ADD COLUMN execution INTEGER NOT NULL DEFAULT 0;
UPDATE inbox SET execution = COALESCE((SELECT i.execution FROM instances i WHERE i.id = inbox.instance_id), 0);

CREATE TABLE tasks_v2 (
    instance_id TEXT    NOT NULL,
    execution   INTEGER NOT NULL,
    task        INTEGER NOT NULL,
    call        TEXT    NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    due_at      INTEGER NOT NULL,
    PRIMARY KEY (instance_id, execution, task)
);
INSERT INTO tasks_v2 (instance_id, execution, task, call, attempt, due_at)
    SELECT t.instance_id, COALESCE(i.execution, 0), t.task, t.call, t.attempt, t.due_at
    FROM tasks t LEFT JOIN instances i ON i.id = t.instance_id;
DROP TABLE tasks;
ALTER TABLE tasks_v2 RENAME TO tasks;
CREATE INDEX tasks_by_due ON tasks (due_at);
