-- Who a session belongs to: the invoke key (its id, as runs record it)
-- whose first message the store took first. It is set when the session's
-- row is inserted, in the transaction that stores that run, and read in
-- the transaction of every later run: a run of another invoke key is
-- refused there, with nothing of it stored, so two keys racing for one new
-- session id leave one owner and no message of the other in its
-- conversation. NULL: started without a key (a host without keys, an admin
-- key, an orchestration, an Agent Framework session); such a session is no
-- invoke key's to continue, and callers without a key continue any.
-- Not `owner`, which is the host that executes the session's runs on a
-- shared hub (0002_shared_hub.sql).
-- A session forgotten (deleted, or expired) is claimed anew by its next run.
ALTER TABLE sessions ADD COLUMN caller TEXT;
-- Sessions stored before: the caller of their earliest run still kept.
UPDATE sessions SET caller = (
    SELECT r.caller FROM runs r
    WHERE r.agent = sessions.agent AND r.session_id = sessions.id
    ORDER BY r.seq LIMIT 1
)
WHERE EXISTS (
    SELECT 1 FROM runs r
    WHERE r.agent = sessions.agent AND r.session_id = sessions.id AND r.caller IS NOT NULL
);
