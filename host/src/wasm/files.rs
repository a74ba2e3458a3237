//! A component's files as the host reads them: the `.wasm` (its name and
//! digest) and its sidecar grants.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::LoadError;

/// `sha256:` + hex of the bytes: the identity of a component version.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The component's name: its file stem (`weather` for `weather.wasm`).
pub fn component_name(path: &Path) -> Result<String, LoadError> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| LoadError::BadFileName(path.to_path_buf()))
}

/// A component file and its sidecar grants (`NAME.toml`), as read from disk.
pub struct ComponentFiles {
    pub name: String,
    pub bytes: Vec<u8>,
    pub grants_source: Option<String>,
}

impl ComponentFiles {
    pub async fn read(path: &Path) -> Result<Self, LoadError> {
        let name = component_name(path)?;
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError::Read {
            path: path.to_path_buf(),
            reason: e,
        })?;
        let sidecar = path.with_extension("toml");
        let grants_source = match tokio::fs::read_to_string(&sidecar).await {
            Ok(source) => Some(source),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(LoadError::Read {
                    path: sidecar,
                    reason: e,
                })
            }
        };
        Ok(Self {
            name,
            bytes,
            grants_source,
        })
    }
}
