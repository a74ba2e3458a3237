//! Component versions kept by digest, so instances replay on the exact code
//! they started with even after the file was replaced or deleted.

use sqlx::Row;

use super::clock::now_ms;
use super::error::StoreError;
use super::open::Store;

/// A component version as stored.
pub struct StoredVersion {
    /// The file stem it was loaded from, e.g. `approval`.
    pub name: String,
    pub wasm: Vec<u8>,
    /// The sidecar grants (TOML) it was loaded with.
    pub grants: Option<String>,
}

/// A component version that instances not ended still run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInUse {
    /// The component (file stem) the version was loaded as.
    pub name: String,
    pub digest: String,
    /// Instances not ended (pending, running, suspended) on it.
    pub instances: i64,
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
    /// Keeps activity set `id` (its pins as JSON). Sets are named by their
    /// content, so writing one again changes nothing.
    pub async fn save_activity_set(&self, id: &str, pins: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO activity_sets (id, pins, stored_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(pins)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The pins (JSON) of activity set `id`, if kept.
    pub async fn activity_set(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT pins FROM activity_sets WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?,
        )
    }

    /// The activity set instance `instance_id` pinned when it started
    /// (`None`: none, or no such instance).
    pub async fn instance_activity_set(
        &self,
        instance_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let set: Option<Option<String>> =
            sqlx::query_scalar("SELECT activity_set FROM instances WHERE id = $1")
                .bind(instance_id)
                .fetch_optional(self.pool())
                .await?;
        Ok(set.flatten())
    }

    /// Each component version instances not ended run on, with how many:
    /// what an operator must keep (the store keeps every version anyway).
    /// Counted over the unfinished instances only (`instances_by_status`).
    pub async fn versions_in_use(&self) -> Result<Vec<VersionInUse>, StoreError> {
        let rows = sqlx::query(
            "SELECT v.name AS name, i.component_digest AS digest, COUNT(*) AS instances \
             FROM instances i JOIN component_versions v ON v.digest = i.component_digest \
             WHERE i.status IN ('Pending', 'Running', 'Suspended') \
             GROUP BY v.name, i.component_digest ORDER BY v.name, i.component_digest",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(VersionInUse {
                    name: r.try_get("name")?,
                    digest: r.try_get("digest")?,
                    instances: r.try_get("instances")?,
                })
            })
            .collect()
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

    /// On each store: a set is kept once (a second write changes nothing),
    /// and an instance reads back the set it was created with.
    #[tokio::test]
    async fn an_instance_reads_back_the_activity_set_it_started_with(
    ) -> Result<(), Box<dyn std::error::Error>> {
        for (store, _dir) in crate::store::test_fixtures::both("pins").await? {
            assert_eq!(store.activity_set("set:a").await?, None);
            store
                .save_activity_set("set:a", r#"{"w":"sha256:1"}"#)
                .await?;
            store
                .save_activity_set("set:a", r#"{"w":"sha256:2"}"#)
                .await?;
            assert_eq!(
                store.activity_set("set:a").await?.as_deref(),
                Some(r#"{"w":"sha256:1"}"#)
            );
            let new = crate::core::instance::NewInstance {
                activity_set: Some("set:a".into()),
                ..crate::store::test_fixtures::new("pinned")
            };
            store.start(new).await?.ok_or("not created")?;
            store
                .start(crate::store::test_fixtures::new("unpinned"))
                .await?
                .ok_or("not created")?;
            assert_eq!(
                store.instance_activity_set("pinned").await?.as_deref(),
                Some("set:a")
            );
            assert_eq!(store.instance_activity_set("unpinned").await?, None);
            assert_eq!(store.instance_activity_set("absent").await?, None);
        }
        Ok(())
    }
}
