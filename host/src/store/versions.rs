//! Component versions kept by digest, so instances replay on the exact code
//! they started with even after the file was replaced or deleted.

use sqlx::Row;

use super::{now_ms, Store, StoreError};

/// A component version as stored.
pub struct StoredVersion {
    /// The file stem it was loaded from, e.g. `approval`.
    pub name: String,
    pub wasm: Vec<u8>,
    /// The sidecar grants (TOML) it was loaded with.
    pub grants: Option<String>,
}

impl Store {
    /// Keeps `wasm` under `digest`; a digest already kept is left untouched.
    pub async fn save_component_version(
        &self,
        digest: &str,
        name: &str,
        wasm: &[u8],
        grants: Option<&str>,
    ) -> Result<(), StoreError> {
        let known: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM component_versions WHERE digest = ?")
                .bind(digest)
                .fetch_optional(self.pool())
                .await?;
        if known.is_some() {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO component_versions (digest, name, wasm, grants, stored_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
        )
        .bind(digest)
        .bind(name)
        .bind(wasm)
        .bind(grants)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub async fn component_version(
        &self,
        digest: &str,
    ) -> Result<Option<StoredVersion>, StoreError> {
        let row = sqlx::query("SELECT name, wasm, grants FROM component_versions WHERE digest = ?")
            .bind(digest)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| {
            Ok(StoredVersion {
                name: r.try_get("name")?,
                wasm: r.try_get("wasm")?,
                grants: r.try_get("grants")?,
            })
        })
        .transpose()
    }
}
