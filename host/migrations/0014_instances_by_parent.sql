-- The sub-orchestrations of an instance, by their parent: a recursive
-- terminate or purge walks them. A child's id says nothing of its parent
-- when its caller chose it (a Durable Task SDK worker names each child).
-- Partial: top-level instances, most of them, cost the index nothing.
CREATE INDEX instances_by_parent ON instances (parent_id) WHERE parent_id IS NOT NULL;
