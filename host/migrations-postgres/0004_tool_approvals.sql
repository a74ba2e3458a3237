-- Tool calls waiting for a human: a run whose model called a tool marked
-- `always-require` waits (holding no instance, no thread) until each such
-- call is approved or denied, or its deadline passes (denied).
CREATE TABLE approvals (
    correlation_id TEXT   NOT NULL,
    call_id        TEXT   NOT NULL,
    tool           TEXT   NOT NULL,
    arguments      TEXT   NOT NULL,
    requested_at   BIGINT NOT NULL,
    deadline       BIGINT NOT NULL,
    -- NULL while undecided, then 'approved' or 'denied'.
    decision       TEXT   CHECK (decision IN ('approved', 'denied')),
    reason         TEXT,
    decided_at     BIGINT,
    PRIMARY KEY (correlation_id, call_id)
);
CREATE INDEX approvals_undecided ON approvals (deadline) WHERE decision IS NULL;
