//! Compiled artifacts on disk, keyed by the component's digest and the
//! engine's compatibility hash, so a restart (or a second host on the same
//! machine, or `agenthost build` before the host) never compiles the same
//! bytes twice. The folder is chosen once ([`CacheFolder`]: never the
//! working folder), and every artifact, wherever it is, is loaded only if
//! [`trust::artifact`] trusts it: it is native code, run outside the
//! sandbox.
//!
//! Beside the host's own cache, a components folder may carry artifacts made
//! ahead of time (`agenthost build --into`, `agenthost compile`, an image's
//! build step) in `.compiled/NAME/`: a Python or JavaScript component takes
//! seconds to compile, which a host started on an empty cache (a new
//! instance of a serverless app) would otherwise pay before its first
//! answer. They are read, never written, by the host: only when its
//! operator says so (`--load-precompiled`: whoever wrote them chose the
//! native code the host will run) and only from a folder [`super::trust`]
//! trusts; one made by another engine or for another machine fails
//! wasmtime's own check at load and is compiled anew.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::Engine;

use super::cache_folder::CacheFolder;
use super::{error, trust, LoadError};

/// How long a load waits for another process compiling the same artifact.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

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
    /// Whether the host may load what it finds there (`--load-precompiled`).
    pub load: bool,
}

impl Beside<'_> {
    /// `FOLDER/.compiled/NAME`, for a name that is one plain path
    /// component: never `..`, a hidden name or a path, whose folder would
    /// be another's (or the components folder itself).
    fn shelf(&self) -> Option<PathBuf> {
        let plain = !self.name.is_empty()
            && !self.name.starts_with('.')
            && !self.name.contains(['/', '\\', '\0']);
        plain.then(|| self.folder.join(PRECOMPILED).join(self.name))
    }
}

/// Whether `name` is one this cache writes: `HEX64-HEX16.cwasm`.
fn is_artifact_name(name: &str) -> bool {
    let Some((digest, engine)) = name
        .strip_suffix(".cwasm")
        .and_then(|stem| stem.split_once('-'))
    else {
        return false;
    };
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    hex(digest, 64) && hex(engine, 16)
}

#[derive(Clone)]
pub struct ArtifactCache {
    folder: Arc<CacheFolder>,
    engine_hash: Arc<str>,
}

impl ArtifactCache {
    /// The cache in `dir` (the operator's), else in the user's cache folder
    /// ([`CacheFolder::choose`]).
    pub fn open(dir: Option<&Path>, engine: &Engine) -> Result<Self, LoadError> {
        let folder = CacheFolder::choose(dir)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            folder: Arc::new(folder),
            engine_hash: format!("{:016x}", hasher.finish()).into(),
        })
    }

    fn file_name(&self, digest: &str) -> String {
        let digest = digest.trim_start_matches("sha256:");
        format!("{digest}-{}.cwasm", self.engine_hash)
    }

    /// Where this cache keeps the artifact of `digest`; `None` when it
    /// keeps nothing on disk.
    fn path_for(&self, digest: &str) -> Option<PathBuf> {
        Some(self.folder.dir()?.join(self.file_name(digest)))
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
        if let Some(component) = path.as_deref().and_then(|p| Self::trusted_load(engine, p)) {
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
        let _compiling = path.as_deref().and_then(Self::lock);
        if let Some(component) = path.as_deref().and_then(|p| Self::trusted_load(engine, p)) {
            return Ok((component, Artifact::Cached));
        }
        let component = Component::from_binary(engine, bytes)
            .map_err(|e| LoadError::Compile(error::describe(&e)))?;
        let Some(path) = path else {
            return Ok((component, Artifact::Compiled));
        };
        match component.serialize() {
            Ok(artifact) => {
                // Write then rename, so a crash never leaves a torn artifact
                // under the final name; written by nobody else whatever the
                // umask, as the next load checks ([`trust::artifact`]).
                let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
                let written = std::fs::write(&tmp, artifact)
                    .and_then(|()| set_mode(&tmp, 0o644))
                    .and_then(|()| std::fs::rename(&tmp, &path));
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

    /// The artifact made ahead of time for this component, if it is
    /// trusted and loads on this engine.
    fn precompiled(&self, engine: &Engine, digest: &str, beside: Beside<'_>) -> Option<Component> {
        let shelf = beside.shelf()?;
        let path = shelf.join(self.file_name(digest));
        if !path.exists() {
            return None;
        }
        if !beside.load {
            tracing::info!(
                artifact = %path.display(),
                "compiled code beside the component is not loaded (loading it is off: serve --load-precompiled turns it on); compiling instead"
            );
            return None;
        }
        Self::trusted_load(engine, &path)
    }

    /// Copies this cache's artifact of `digest` beside the component, where
    /// a host loading it from that folder finds it ([`PRECOMPILED`]), and
    /// removes the artifacts of the component's earlier builds. Returns the
    /// artifact's path.
    pub fn place_beside(&self, digest: &str, beside: Beside<'_>) -> std::io::Result<PathBuf> {
        let shelf = beside.shelf().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("'{}' cannot name a folder of compiled code", beside.name),
            )
        })?;
        for folder in [beside.folder.join(PRECOMPILED), shelf.clone()] {
            if std::fs::symlink_metadata(&folder).is_ok_and(|m| !m.is_dir()) {
                return Err(std::io::Error::other(format!(
                    "{} is not a folder (a link?): not written to",
                    folder.display()
                )));
            }
        }
        let mut folder = std::fs::DirBuilder::new();
        folder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o755);
        folder.create(&shelf)?;
        let name = self.file_name(digest);
        let target = shelf.join(&name);
        let source = self.path_for(digest).ok_or_else(|| {
            std::io::Error::other(
                "this run kept no compiled code on disk (no trusted cache folder)",
            )
        })?;
        // Copied beside, then renamed: a host loading meanwhile never reads
        // half an artifact.
        // Readable by all, written by nobody else whatever the umask or the
        // cache file's mode: what a host trusts ([`trust::artifact`]).
        let partial = shelf.join(format!(".{name}.partial-{}", uuid::Uuid::new_v4().simple()));
        std::fs::copy(source, &partial)
            .and_then(|_| set_mode(&partial, 0o644))
            .and_then(|()| std::fs::rename(&partial, &target))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&partial);
            })?;
        // The component's earlier builds; nothing this cache did not name.
        for entry in std::fs::read_dir(&shelf)?.flatten() {
            let earlier = entry.file_name();
            let earlier = earlier.to_string_lossy();
            if earlier != name.as_str() && is_artifact_name(&earlier) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(target)
    }

    /// Whether a host running as this user would load the artifact at
    /// `path` ([`trust::artifact`]), and if not, why.
    pub(crate) fn trusted(path: &Path) -> Result<(), trust::Untrusted> {
        trust::artifact(path)
    }

    /// Removes the folders of compiled code of components not in `names`
    /// from `folder`'s [`PRECOMPILED`] (not a link; its entries that are
    /// folders, not links, and only the artifacts in them).
    pub fn remove_others(folder: &Path, names: &[String]) {
        let root = folder.join(PRECOMPILED);
        if !std::fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
            return;
        }
        let Ok(shelves) = std::fs::read_dir(&root) else {
            return;
        };
        for shelf in shelves.flatten() {
            let kept = names.iter().any(|n| shelf.file_name() == n.as_str());
            if kept || !shelf.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(files) = std::fs::read_dir(shelf.path()) else {
                continue;
            };
            for file in files.flatten() {
                if is_artifact_name(&file.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_file(file.path());
                }
            }
            // Only when nothing else is left in it.
            let _ = std::fs::remove_dir(shelf.path());
        }
    }

    /// The artifact at `path`, if it is there, trusted and loads: the one
    /// place native code is read from disk.
    fn trusted_load(engine: &Engine, path: &Path) -> Option<Component> {
        if std::fs::symlink_metadata(path).is_err() {
            return None;
        }
        if let Err(reason) = trust::artifact(path) {
            tracing::warn!(artifact = %path.display(), %reason, "not loading this compiled code: it would run as native code of this host, outside the sandbox, and another user may have written or swapped it; compiling instead");
            return None;
        }
        // SAFETY: the file and every folder above it belong to this host's
        // user or root and nobody else may write them ([`trust::artifact`],
        // checked just above: nobody else can change them since); it was
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
    const DIGEST: &str = "sha256:00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff";

    fn engine_with(epochs: bool) -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(epochs);
        Engine::new(&config).unwrap()
    }

    /// A host's load of the component, on a cache of its own, new.
    fn load(engine: &Engine, root: &Path, beside: Beside<'_>) -> Artifact {
        let own = root.join(format!("host-cache-{}", uuid::Uuid::new_v4().simple()));
        let cache = ArtifactCache::open(Some(&own), engine).unwrap();
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
            load: true,
        };
        assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);

        // What `build --into` does: compiled once, placed beside.
        let builder = ArtifactCache::open(Some(&root.path().join("builder")), &engine).unwrap();
        let (_, made) = builder
            .get_or_compile(&engine, DIGEST, EMPTY_COMPONENT, None)
            .unwrap();
        assert_eq!(made, Artifact::Compiled);
        let placed = builder.place_beside(DIGEST, beside).unwrap();
        assert!(placed.starts_with(folder.join(PRECOMPILED).join("poet")));
        assert_eq!(load(&engine, root.path(), beside), Artifact::Precompiled);
        // A host that was not told to load it compiles.
        let off = Beside {
            load: false,
            ..beside
        };
        assert_eq!(load(&engine, root.path(), off), Artifact::Compiled);
        // Another component's name has nothing beside it.
        let other = Beside {
            name: "other",
            folder: &folder,
            load: true,
        };
        assert_eq!(load(&engine, root.path(), other), Artifact::Compiled);

        // Code made with other settings, under the name this engine looks
        // for: wasmtime's check refuses it and the host compiles.
        let elsewhere = engine_with(false);
        let foreign = ArtifactCache::open(Some(&root.path().join("foreign")), &elsewhere).unwrap();
        foreign
            .get_or_compile(&elsewhere, DIGEST, EMPTY_COMPONENT, None)
            .unwrap();
        std::fs::copy(foreign.path_for(DIGEST).unwrap(), &placed).unwrap();
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
    fn the_hosts_own_cache_loads_only_what_no_other_user_may_write_or_swap() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine_with(true);
        let compile = |cache: &ArtifactCache| {
            cache
                .get_or_compile(&engine, DIGEST, EMPTY_COMPONENT, None)
                .unwrap()
                .1
        };
        let mine = ArtifactCache::open(Some(&root.path().join("mine")), &engine).unwrap();
        assert_eq!(compile(&mine), Artifact::Compiled);
        assert_eq!(compile(&mine), Artifact::Cached);
        let artifact = mine.path_for(DIGEST).unwrap();
        let mode = |path: &Path| {
            std::fs::symlink_metadata(path)
                .unwrap()
                .permissions()
                .mode()
        };
        assert_eq!(mode(&artifact) & 0o777, 0o644);
        // Writable by others: compiled instead, and written anew, private.
        std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(compile(&mine), Artifact::Compiled);
        assert_eq!(mode(&artifact) & 0o777, 0o644);
        assert_eq!(compile(&mine), Artifact::Cached);
        // A link in its place (to a good artifact) is not followed.
        let elsewhere = root.path().join("elsewhere.cwasm");
        std::fs::rename(&artifact, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &artifact).unwrap();
        assert_eq!(compile(&mine), Artifact::Compiled);

        // The same code, under the name the host looks for, in a cache
        // folder anyone may write to: neither read nor written.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::copy(&elsewhere, open.join(mine.file_name(DIGEST))).unwrap();
        let listing = || {
            let mut names: Vec<_> = std::fs::read_dir(&open)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing();
        let untrusted = ArtifactCache::open(Some(&open), &engine).unwrap();
        assert_eq!(compile(&untrusted), Artifact::Compiled);
        // Kept, for this process, in a private folder of its own.
        assert_eq!(compile(&untrusted), Artifact::Cached);
        assert_eq!(listing(), before);
    }

    #[test]
    fn a_name_that_is_not_one_plain_file_name_places_nothing_and_removes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine_with(true);
        let folder = root.path().join("components");
        std::fs::create_dir(&folder).unwrap();
        let kept = folder.join("poet.wasm");
        std::fs::write(&kept, b"x").unwrap();
        let cache = ArtifactCache::open(Some(&root.path().join("builder")), &engine).unwrap();
        cache
            .get_or_compile(&engine, DIGEST, EMPTY_COMPONENT, None)
            .unwrap();
        for name in ["..", ".", ".hidden", "a/b", ""] {
            let beside = Beside {
                name,
                folder: &folder,
                load: true,
            };
            assert!(cache.place_beside(DIGEST, beside).is_err(), "{name:?}");
            assert_eq!(load(&engine, root.path(), beside), Artifact::Compiled);
        }
        assert!(kept.exists());
        // Removing the code of components no longer there touches only
        // artifacts in folders of `.compiled`.
        let beside = Beside {
            name: "gone",
            folder: &folder,
            load: true,
        };
        let placed = cache.place_beside(DIGEST, beside).unwrap();
        let mine = placed.with_file_name("notes.txt");
        std::fs::write(&mine, b"mine").unwrap();
        ArtifactCache::remove_others(&folder, &["poet".to_string()]);
        assert!(!placed.exists() && mine.exists() && kept.exists());
    }

    #[test]
    fn placing_a_new_build_removes_the_earlier_ones() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine_with(true);
        let folder = root.path().join("components");
        let beside = Beside {
            name: "poet",
            folder: &folder,
            load: true,
        };
        let cache = ArtifactCache::open(Some(&root.path().join("builder")), &engine).unwrap();
        let (one, two) = (
            format!("sha256:{}", "01".repeat(32)),
            format!("sha256:{}", "02".repeat(32)),
        );
        for digest in [&one, &two] {
            cache
                .get_or_compile(&engine, digest, EMPTY_COMPONENT, None)
                .unwrap();
        }
        let first = cache.place_beside(&one, beside).unwrap();
        let second = cache.place_beside(&two, beside).unwrap();
        assert!(!first.exists() && second.exists());
        let left: Vec<_> = std::fs::read_dir(folder.join(PRECOMPILED).join("poet"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1);
    }
}
