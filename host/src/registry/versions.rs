//! Component versions by digest: the one an orchestration instance started on
//! is the one it replays on, even after its file was replaced or deleted.
//!
//! Versions replaced while the host runs stay in memory; after a restart they
//! are loaded again from the bytes the store kept (compiled artifacts come
//! from the cache, so that costs about a millisecond). Each digest loads at
//! most once at a time, and a slow load never blocks lookups of others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use super::Registry;
use crate::store::StoreError;
use crate::wasm::LoadedComponent;

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// Transient: the version exists but could not be loaded now (a granted
    /// variable missing, the cache unwritable…). Callers retry later.
    #[error("component version {digest} could not be loaded again: {reason}")]
    Unloadable { digest: String, reason: String },
    #[error("component version {digest} has no orchestration '{name}'")]
    NoOrchestration { digest: String, name: String },
    #[error("orchestration '{name}' is no longer served and its version {digest} is not kept")]
    Gone { digest: String, name: String },
    /// Transient: the caller should try again later rather than fail.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl VersionError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unloadable { .. } | Self::Store(_))
    }
}

type Cell = Arc<OnceCell<Arc<LoadedComponent>>>;

/// Versions no longer served from the directory but still needed.
#[derive(Default)]
pub struct Versions {
    retired: Mutex<HashMap<String, Cell>>,
}

impl Versions {
    /// Keeps a replaced or removed version in memory if instances may replay
    /// on it, with the grants it was last loaded with. One that only serves
    /// activities is loaded again from the store if an instance pinned it.
    pub fn retire(&self, component: Arc<LoadedComponent>) {
        if component.manifest.orchestrations.is_empty() {
            return;
        }
        let digest = component.digest.clone();
        let cell = Arc::new(OnceCell::new_with(Some(component)));
        self.cells().insert(digest, cell);
    }

    fn cell(&self, digest: &str) -> Cell {
        self.cells().entry(digest.to_string()).or_default().clone()
    }

    fn cells(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cell>> {
        self.retired.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Registry {
    /// The component version `digest`, which must hold orchestration `name`:
    /// the one served now if it is that version, else a retired one, else the
    /// bytes kept in the store.
    ///
    /// An instance created before versions were kept has a digest the store
    /// never saw; it runs on the version served now, as it did before (replay
    /// still detects a change of steps).
    pub async fn pinned(
        &self,
        digest: &str,
        name: &str,
    ) -> Result<Arc<LoadedComponent>, VersionError> {
        let component = match self.version(digest).await? {
            Some(component) => component,
            None => match self.orchestration(name) {
                Some(served) => {
                    tracing::warn!(%digest, orchestration = name, served = %served.component.digest, "component version not kept (instance older than version keeping); using the served one");
                    served.component
                }
                None => {
                    return Err(VersionError::Gone {
                        digest: digest.to_string(),
                        name: name.to_string(),
                    })
                }
            },
        };
        if component.manifest.orchestration(name).is_none() {
            return Err(VersionError::NoOrchestration {
                digest: digest.to_string(),
                name: name.to_string(),
            });
        }
        Ok(component)
    }

    /// `None` when the store does not keep the version.
    pub(super) async fn version(
        &self,
        digest: &str,
    ) -> Result<Option<Arc<LoadedComponent>>, VersionError> {
        if let Some(served) = self.served_version(digest) {
            return Ok(Some(served));
        }
        let cell = self.versions.cell(digest);
        let loaded = cell.get_or_try_init(|| self.load_kept(digest)).await;
        match loaded {
            Ok(component) => Ok(Some(component.clone())),
            Err(LoadKept::NotKept) => Ok(None),
            Err(LoadKept::Failed(e)) => Err(e),
        }
    }

    async fn load_kept(&self, digest: &str) -> Result<Arc<LoadedComponent>, LoadKept> {
        let unloadable = |reason: String| {
            LoadKept::Failed(VersionError::Unloadable {
                digest: digest.to_string(),
                reason,
            })
        };
        let stored = self
            .store
            .component_version(digest)
            .await
            .map_err(|e| LoadKept::Failed(e.into()))?
            .ok_or(LoadKept::NotKept)?;
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
        Ok(component)
    }
}

enum LoadKept {
    NotKept,
    Failed(VersionError),
}
