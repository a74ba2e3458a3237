-- The id of each batch the writer commits, written in the batch's own
-- transaction. When the answer to a COMMIT is lost (the connection broke),
-- the writer asks whether its id is here before it writes anything again:
-- an ambiguous commit is resolved, never re-applied. Old ids are pruned.
CREATE TABLE commits (
    id TEXT   PRIMARY KEY,
    at BIGINT NOT NULL
);
