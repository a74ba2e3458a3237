-- The writer prunes batch ids older than ten minutes: without an index the
-- prune read every mark kept (thousands a second under load) and held up
-- the writer's transaction for tens of milliseconds. Marks are written in
-- time order, so a block range index finds the old ones at a fraction of a
-- b-tree's cost to every batch that writes one.
CREATE INDEX commits_by_at ON commits USING brin (at);
