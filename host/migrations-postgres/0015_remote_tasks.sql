-- An orchestration's call-remote-agent, one row per call attempt (its
-- correlation id), written before the message is sent: the message's id
-- (random, so that no other caller's message can share it), then the remote
-- task's endpoint and id as soon as the remote host names them. After a crash
-- the call goes on by GetTask on that task, or sends again with the same
-- messageId if it had not got that far. Deleted with its instance.
CREATE TABLE remote_tasks (
    correlation_id TEXT PRIMARY KEY,
    instance_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    endpoint TEXT,
    task_id TEXT,
    -- 1 while the remote task's request for input is shown as the instance's
    -- custom status (status_shown): status_before is put back afterwards,
    -- unless the code set another status meanwhile. 0 or 1, one type both
    -- databases decode alike.
    shown_status BIGINT NOT NULL DEFAULT 0,
    status_shown TEXT,
    status_before TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX remote_tasks_by_instance ON remote_tasks (instance_id);
