-- A batch is one statement, and outside a transaction that statement is its
-- commit. Some of its answers are decided by the statement itself (which
-- host runs a queued run, whether a run was ended by this batch): they are
-- kept with the batch's mark, so that a batch whose answer was lost with its
-- connection, and turns out to have committed, still has them.
ALTER TABLE commits ADD COLUMN answers TEXT;
