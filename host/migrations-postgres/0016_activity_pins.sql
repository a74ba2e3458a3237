-- The versions of other components' activities an instance calls: pinned
-- when it starts. A set maps each component that serves activities to the
-- digest served at that moment (JSON object, component name -> digest); it
-- is written once, before any instance names it, and never changed. An
-- instance names the set current when it started (NULL: started before pins
-- were kept, or when no component served activities; it then calls current
-- versions).
CREATE TABLE activity_sets (
    id         TEXT PRIMARY KEY,
    pins       TEXT NOT NULL,
    stored_at  BIGINT NOT NULL
);
ALTER TABLE instances ADD COLUMN activity_set TEXT;
