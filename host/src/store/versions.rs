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
    /// Keeps `wasm` under `digest`. For a digest already kept only the grants
    /// are updated: a version runs under the grants it was last loaded with,
    /// so a grant revoked in the sidecar stays revoked for old instances.
    pub async fn save_component_version(
        &self,
        digest: &str,
        name: &str,
        wasm: &[u8],
        grants: Option<&str>,
    ) -> Result<(), StoreError> {
        let known: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM component_versions WHERE digest = $1")
                .bind(digest)
                .fetch_optional(self.pool())
                .await?;
        if known.is_some() {
            sqlx::query("UPDATE component_versions SET grants = $1 WHERE digest = $2")
                .bind(grants)
                .bind(digest)
                .execute(self.pool())
                .await?;
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO component_versions (digest, name, wasm, grants, stored_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (digest) DO NOTHING",
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
        let row =
            sqlx::query("SELECT name, wasm, grants FROM component_versions WHERE digest = $1")
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

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn a_version_keeps_its_bytes_and_its_latest_grants(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (_dir, store) = crate::store::test_fixtures::sqlite().await?;
        assert!(store.component_version("sha256:x").await?.is_none());
        store
            .save_component_version("sha256:x", "c", b"v1", Some("env = [\"A\"]"))
            .await?;
        // Loaded again after its sidecar changed: a revoked grant stays revoked.
        store
            .save_component_version("sha256:x", "c", b"v1", None)
            .await?;
        let kept = store
            .component_version("sha256:x")
            .await?
            .ok_or("not kept")?;
        assert_eq!(
            (kept.name.as_str(), kept.wasm.as_slice()),
            ("c", b"v1".as_slice())
        );
        assert_eq!(kept.grants, None);
        Ok(())
    }
}
