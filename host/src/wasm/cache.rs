//! Compiled artifacts on disk, keyed by the component's digest and the
//! engine's compatibility hash, so a restart (or a second host on the same
//! machine) never compiles the same bytes twice.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::Engine;

use super::{error, LoadError};

/// How long a load waits for another process compiling the same artifact.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

#[derive(Clone)]
pub struct ArtifactCache {
    dir: Arc<PathBuf>,
    engine_hash: Arc<str>,
}

impl ArtifactCache {
    pub fn open(dir: &Path, engine: &Engine) -> Result<Self, LoadError> {
        std::fs::create_dir_all(dir).map_err(|e| LoadError::Cache {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: Arc::new(dir.to_path_buf()),
            engine_hash: format!("{:016x}", hasher.finish()).into(),
        })
    }

    fn path_for(&self, digest: &str) -> PathBuf {
        let digest = digest.trim_start_matches("sha256:");
        self.dir
            .join(format!("{digest}-{}.cwasm", self.engine_hash))
    }

    /// Returns the compiled component and whether it came from the cache.
    /// A cached artifact that fails to load (truncated, other engine) is
    /// replaced by a fresh compile rather than failing the load.
    pub fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(Component, bool), LoadError> {
        let path = self.path_for(digest);
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, true));
        }
        // One compile of an artifact at a time across every process sharing
        // the folder (hosts started together, `build` beside a running
        // host): the others wait for it and load what it wrote, instead of
        // each compiling the same bytes (seconds of CPU for a Python or
        // JavaScript component). Without a lock (a read-only folder, say)
        // each compiles, as before.
        let _compiling = Self::lock(&path);
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, true));
        }
        let component = Component::from_binary(engine, bytes)
            .map_err(|e| LoadError::Compile(error::describe(&e)))?;
        match component.serialize() {
            Ok(artifact) => {
                // Write then rename, so a crash never leaves a torn artifact under the final name.
                let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
                let written =
                    std::fs::write(&tmp, artifact).and_then(|()| std::fs::rename(&tmp, &path));
                if let Err(e) = written {
                    tracing::warn!(path = %path.display(), error = %e, "could not cache compiled artifact");
                    let _ = std::fs::remove_file(&tmp);
                }
            }
            Err(e) => {
                tracing::warn!(error = %error::describe(&e), "could not serialize compiled artifact")
            }
        }
        Ok((component, false))
    }

    /// The artifact at `path`, if it is there and loads.
    fn cached(engine: &Engine, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: the cache directory is owned by this host; every file in
        // it was written by `Component::serialize` below, under a name that
        // includes the engine's compatibility hash.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %error::describe(&e), "discarding unusable cached artifact");
                None
            }
        }
    }

    /// Waits for, then holds, the compile lock of the artifact at `path`
    /// (released when the file is dropped, or by the kernel if the process
    /// dies). A holder that does not finish within [`LOCK_WAIT`] (stopped,
    /// or on a file system whose locks never answer) is waited for no
    /// longer: this process compiles on its own, as without a lock.
    fn lock(path: &Path) -> Option<std::fs::File> {
        let lock = path.with_extension("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock)
            .ok()?;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut said = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(file),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    if !said {
                        tracing::info!(artifact = %path.display(), "another process is compiling this component; waiting for it");
                        said = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => {
                    tracing::warn!(lock = %lock.display(), error = %e, "compiling without the compile lock");
                    return None;
                }
            }
        }
    }
}
