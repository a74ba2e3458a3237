//! Component versions by digest: the one an orchestration instance started on
//! is the one it replays on, even after its file was replaced or deleted.
//!
//! Versions replaced while the host runs stay in memory; after a restart they
//! are loaded again from the bytes the store kept (compiled artifacts come
//! from the cache, so that costs about a millisecond).

use std::collections::HashMap;
use std::sync::Arc;

use super::Registry;
use crate::runtime::LoadedComponent;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("component version {digest} is not kept by this host")]
    Unknown { digest: String },
    #[error("component version {digest} could not be loaded again: {reason}")]
    Unloadable { digest: String, reason: String },
    #[error("component version {digest} has no orchestration '{name}'")]
    NoOrchestration { digest: String, name: String },
    /// Transient: the caller should try again later rather than fail.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Versions no longer served from the directory but still needed.
#[derive(Default)]
pub struct Versions {
    /// Held across a load from the store, so one version loads once.
    retired: tokio::sync::Mutex<HashMap<String, Arc<LoadedComponent>>>,
}

impl Versions {
    /// Keeps a replaced or removed version if instances may replay on it.
    pub async fn retire(&self, component: Arc<LoadedComponent>) {
        if component.manifest.orchestrations.is_empty() {
            return;
        }
        self.retired
            .lock()
            .await
            .entry(component.digest.clone())
            .or_insert(component);
    }
}

impl Registry {
    /// The component version `digest`, which must hold orchestration `name`:
    /// the one served now if it is that version, else a retired one, else the
    /// bytes kept in the store.
    pub async fn pinned(
        &self,
        digest: &str,
        name: &str,
    ) -> Result<Arc<LoadedComponent>, VersionError> {
        let component = self.version(digest).await?;
        if component.manifest.orchestration(name).is_none() {
            return Err(VersionError::NoOrchestration {
                digest: digest.to_string(),
                name: name.to_string(),
            });
        }
        Ok(component)
    }

    async fn version(&self, digest: &str) -> Result<Arc<LoadedComponent>, VersionError> {
        if let Some(served) = self.components().into_iter().find(|c| c.digest == digest) {
            return Ok(served);
        }
        let mut retired = self.versions.retired.lock().await;
        if let Some(component) = retired.get(digest) {
            return Ok(component.clone());
        }
        let unloadable = |reason: String| VersionError::Unloadable {
            digest: digest.to_string(),
            reason,
        };
        let stored =
            self.store
                .component_version(digest)
                .await?
                .ok_or_else(|| VersionError::Unknown {
                    digest: digest.to_string(),
                })?;
        let grants = self
            .runtime
            .grants(&stored.name, stored.grants.as_deref())
            .map_err(|e| unloadable(e.to_string()))?;
        let path = self.dir.join(format!("{}.wasm", stored.name));
        let component = self
            .runtime
            .load_bytes(&stored.name, &path, stored.wasm, grants)
            .await
            .map_err(|e| unloadable(e.to_string()))?;
        if component.digest != digest {
            return Err(unloadable(format!(
                "the stored bytes hash to {}",
                component.digest
            )));
        }
        tracing::info!(component = %stored.name, %digest, "loaded a kept component version for replay");
        retired.insert(digest.to_string(), component.clone());
        Ok(component)
    }
}
