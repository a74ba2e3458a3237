-- Sessions and messages stored in their key's order (WITHOUT ROWID): the
-- key is how every read and write finds them, and a table with a rowid
-- kept each row twice, once in the table and once in the index of its
-- primary key. A run on a new session wrote two pages of each to the WAL
-- (the table's last leaf and the key's page); now one. A session's
-- messages are read in key order from consecutive cells of one B-tree,
-- not an index entry and a table lookup each.
CREATE TABLE sessions_by_key (
    agent          TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    caller         TEXT,
    PRIMARY KEY (agent, id)
) WITHOUT ROWID;
INSERT INTO sessions_by_key (agent, id, created_at, last_active_at, caller)
    SELECT agent, id, created_at, last_active_at, caller FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_by_key RENAME TO sessions;

CREATE TABLE messages_by_key (
    agent          TEXT    NOT NULL,
    session_id     TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    correlation_id TEXT    NOT NULL,
    body           TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (agent, session_id, seq)
) WITHOUT ROWID;
INSERT INTO messages_by_key (agent, session_id, seq, correlation_id, body, created_at)
    SELECT agent, session_id, seq, correlation_id, body, created_at FROM messages;
DROP TABLE messages;
ALTER TABLE messages_by_key RENAME TO messages;
