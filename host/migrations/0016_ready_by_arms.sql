-- The ready query's arms each read only what they want, however many
-- instances wait for a later start. Before, one index held the scheduled
-- Pending instances by time, but "Pending and (not scheduled or due)" was
-- read through the status index, every scheduled one with it, on every
-- scheduler pass (100,000 of them: 30 ms a pass), and SQLite's planner
-- took the status index for the next start time too.
--
-- `instances_to_start`: instances to run now for their start, not
-- scheduled (few: each leaves it with its first episode). Its predicate is
-- written as the ready query writes its arm, which is how SQLite knows it
-- may use it.
-- `instances_scheduled_by_status`: scheduled instances not yet run, by
-- status and time (the due ones, and the next time one is due); they leave
-- it as they run, as the old index's did.
-- The old index is dropped last: on PostgreSQL a DROP INDEX locks the table
-- against reads too, until the migration commits; the builds before it
-- only hold writes back.
CREATE INDEX instances_scheduled_by_status ON instances (status, start_at)
    WHERE start_at IS NOT NULL AND status IN ('Pending', 'ContinuedAsNew');
CREATE INDEX instances_to_start ON instances (status, id)
    WHERE status IN ('Pending', 'ContinuedAsNew') AND start_at IS NULL;
DROP INDEX instances_scheduled;
