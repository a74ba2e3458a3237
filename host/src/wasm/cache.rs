//! Compiled artifacts on disk, keyed by the component's digest and the
//! engine's compatibility hash, so a restart (or a second host on the same
//! machine) never compiles the same bytes twice.
//!
//! Beside the host's own cache, a components folder may carry artifacts made
//! ahead of time (`agenthost build --into`, `agenthost compile`, an image's
//! build step) in `.compiled/NAME/`: a Python or JavaScript component takes
//! seconds to compile, which a host started on an empty cache (a new
//! instance of a serverless app) would otherwise pay before its first
//! answer. They are read, never written, by the host, and only from a
//! folder [`super::trust`] trusts; one made by another engine or for
//! another machine fails wasmtime's own check at load and is compiled anew.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::Engine;

use super::{error, trust, LoadError};

/// How long a load waits for another process compiling the same artifact.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The folder of a components folder that holds artifacts made ahead of time.
pub const PRECOMPILED: &str = ".compiled";

/// Where a loaded component's compiled code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// Compiled by this load.
    Compiled,
    /// The host's own cache.
    Cached,
    /// Made ahead of time, beside the component ([`PRECOMPILED`]).
    Precompiled,
}

impl Artifact {
    pub fn as_str(self) -> &'static str {
        match self {
            Artifact::Compiled => "compiled",
            Artifact::Cached => "cache",
            Artifact::Precompiled => "precompiled",
        }
    }
}

/// A component's file: its name and the folder it is in.
#[derive(Clone, Copy)]
pub struct Beside<'a> {
    pub name: &'a str,
    pub folder: &'a Path,
}

impl Beside<'_> {
    fn shelf(&self) -> PathBuf {
        self.folder.join(PRECOMPILED).join(self.name)
    }
}

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

    fn file_name(&self, digest: &str) -> String {
        let digest = digest.trim_start_matches("sha256:");
        format!("{digest}-{}.cwasm", self.engine_hash)
    }

    fn path_for(&self, digest: &str) -> PathBuf {
        self.dir.join(self.file_name(digest))
    }

    /// Returns the compiled component and where it came from: this cache,
    /// else the artifacts made ahead of time beside the component, else a
    /// compile (written to this cache). An artifact that fails to load
    /// (truncated, another engine, another machine's CPU) is passed over
    /// rather than failing the load.
    pub fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
        beside: Option<Beside<'_>>,
    ) -> Result<(Component, Artifact), LoadError> {
        let path = self.path_for(digest);
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, Artifact::Cached));
        }
        if let Some(component) = beside.and_then(|b| self.precompiled(engine, digest, b)) {
            return Ok((component, Artifact::Precompiled));
        }
        // One compile of an artifact at a time across every process sharing
        // the folder (hosts started together, `build` beside a running
        // host): the others wait for it and load what it wrote, instead of
        // each compiling the same bytes (seconds of CPU for a Python or
        // JavaScript component). Without a lock (a read-only folder, say)
        // each compiles, as before.
        let _compiling = Self::lock(&path);
        if let Some(component) = Self::cached(engine, &path) {
            return Ok((component, Artifact::Cached));
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
        Ok((component, Artifact::Compiled))
    }

    /// The artifact made ahead of time for this component, if its folder
    /// and file are trusted and it loads on this engine.
    fn precompiled(&self, engine: &Engine, digest: &str, beside: Beside<'_>) -> Option<Component> {
        let shelf = beside.shelf();
        let path = shelf.join(self.file_name(digest));
        if !path.exists() {
            return None;
        }
        let me = trust::uid_of_process()?;
        if !trust::folder(&shelf, me, trust::Owner::MeOrRoot) || !trust::file(&path, me) {
            tracing::warn!(
                artifact = %path.display(),
                "not loading a precompiled artifact: it, or a folder on its path, may be written by another user than this host's or root; compiling instead"
            );
            return None;
        }
        Self::cached(engine, &path)
    }

    /// Copies this cache's artifact of `digest` beside the component, where
    /// a host loading it from that folder finds it ([`PRECOMPILED`]), and
    /// removes the artifacts of the component's earlier builds. Returns the
    /// artifact's path.
    pub fn place_beside(&self, digest: &str, beside: Beside<'_>) -> std::io::Result<PathBuf> {
        let shelf = beside.shelf();
        let mut folder = std::fs::DirBuilder::new();
        folder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o755);
        folder.create(&shelf)?;
        let name = self.file_name(digest);
        let target = shelf.join(&name);
        // Copied beside, then renamed: a host loading meanwhile never reads
        // half an artifact.
        let partial = shelf.join(format!(".{name}.partial-{}", std::process::id()));
        std::fs::copy(self.path_for(digest), &partial)
            .and_then(|_| std::fs::rename(&partial, &target))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&partial);
            })?;
        for entry in std::fs::read_dir(&shelf)?.flatten() {
            if entry.file_name() != name.as_str() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(target)
    }

    /// The artifact at `path`, if it is there and loads.
    fn cached(engine: &Engine, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: the file is in this host's own cache (its operator's
        // choice), or beside the component in a folder only this host's
        // user or root may write ([`ArtifactCache::precompiled`]); each was
        // written by `Component::serialize` under a name that includes the
        // engine's compatibility hash, and wasmtime checks the engine and
        // CPU it was made for before loading it.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %error::describe(&e), "passing over a compiled artifact this engine cannot load (truncated, or made by another engine or for another CPU)");
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The smallest component: its header alone.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";
    const DIGEST: &str = "sha256:00ff";

    fn engine_with(epochs: bool) -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(epochs);
        Engine::new(&config).unwrap()
    }

    /// A host's load of the component, on a cache of its own, new.
    fn load(engine: &Engine, root: &Path, beside: Beside<'_>) -> Artifact {
        let own = root.join(format!("host-cache-{}", uuid::Uuid::new_v4().simple()));
        let cache = ArtifactCache::open(&own, engine).unwrap();
        cache
            .get_or_compile(engine, DIGEST, EMPTY_COMPONENT, Some(beside))
            .unwrap()
            .1
    }

    #[test]
    fn code_compiled_beside_is_loaded_and_what_does_not_fit_or_is_not_trusted_is_compiled() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine_with(true);
        let folder = root.path().join("components");
        std::fs::create_dir(&folder).unwrap();
        let beside = Beside {
            name: "poet",
            folder: &folder,
        };
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);

        // What `build --into` does: compiled once, placed beside.
        let builder = ArtifactCache::open(&root.path().join("builder"), &engine).unwrap();
        let (_, made) = builder
            .get_or_compile(&engine, DIGEST, EMPTY_COMPONENT, None)
            .unwrap();
        assert_eq!(made, Artifact::Compiled);
        let placed = builder.place_beside(DIGEST, beside).unwrap();
        assert!(placed.starts_with(folder.join(PRECOMPILED).join("poet")));
        assert_eq!(load(&engine, root.path(), beside), Artifact::Precompiled);
        // Another component's name has nothing beside it.
        let other = Beside {
            name: "other",
            folder: &folder,
        };
        assert_eq!(load(&engine, root.path(), other), Artifact::Compiled);

        // Code made with other settings, under the name this engine looks
        // for: wasmtime's check refuses it and the host compiles.
        let elsewhere = engine_with(false);
        let foreign = ArtifactCache::open(&root.path().join("foreign"), &elsewhere).unwrap();
        foreign
            .get_or_compile(&elsewhere, DIGEST, EMPTY_COMPONENT, None)
            .unwrap();
        std::fs::copy(foreign.path_for(DIGEST), &placed).unwrap();
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);
        std::fs::write(&placed, b"truncated").unwrap();
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);

        // Placed again; a folder anyone may write to is not read.
        builder.place_beside(DIGEST, beside).unwrap();
        assert_eq!(load(&engine, root.path(), beside), Artifact::Precompiled);
        let shelf = folder.join(PRECOMPILED);
        std::fs::set_permissions(&shelf, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);
        std::fs::set_permissions(&shelf, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&placed, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);
    }

    #[test]
    fn placing_a_new_build_removes_the_earlier_ones() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine_with(true);
        let folder = root.path().join("components");
        let beside = Beside {
            name: "poet",
            folder: &folder,
        };
        let cache = ArtifactCache::open(&root.path().join("builder"), &engine).unwrap();
        for digest in ["sha256:01", "sha256:02"] {
            cache
                .get_or_compile(&engine, digest, EMPTY_COMPONENT, None)
                .unwrap();
        }
        let first = cache.place_beside("sha256:01", beside).unwrap();
        let second = cache.place_beside("sha256:02", beside).unwrap();
        assert!(!first.exists() && second.exists());
        let left: Vec<_> = std::fs::read_dir(folder.join(PRECOMPILED).join("poet"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1);
    }
}
