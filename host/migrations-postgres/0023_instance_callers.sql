-- Who started an instance, when a host's endpoint keys say: the id of the
-- invoke key (a digest, never the key), as runs.caller records it, so that
-- a key reaches the instances it started and no other caller's. A
-- sub-orchestration records its parent's. NULL: started by a caller who
-- reaches every instance (an admin key, the gRPC endpoint, a host without
-- keys). Written when the id is created; a restart of a finished id keeps
-- it (only its owner, or a caller of full reach, may restart it).
ALTER TABLE instances ADD COLUMN caller TEXT;
CREATE INDEX instances_by_caller ON instances (caller, created_at, id) WHERE caller IS NOT NULL;
