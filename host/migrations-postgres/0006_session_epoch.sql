-- A session's epoch counts its changes of owner. Each run write carries the
-- owner and epoch its host began the run under, and is refused when they no
-- longer hold (core::fence): a host paused past its lease cannot write to a
-- session another host took over, even if the session came back to it.
ALTER TABLE sessions ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
