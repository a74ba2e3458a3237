-- Every component version an orchestration may need to replay on, by content
-- digest. Written when a component with orchestrations is first loaded; never
-- updated, so an instance always finds the exact bytes it started with.
CREATE TABLE component_versions (
    digest     TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    wasm       BLOB NOT NULL,
    -- The sidecar grants file (TOML) the version was loaded with, if any.
    grants     TEXT,
    stored_at  INTEGER NOT NULL
);
