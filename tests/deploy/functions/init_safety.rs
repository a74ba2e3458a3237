//! What `functions init` keeps and leaves: run in the folder that holds the
//! components (`init .`, `--components components`), each component stays
//! byte for byte; an `init` that fails leaves no folder behind.

use std::collections::BTreeMap;
use std::path::Path;

use super::super::components_with;
use super::{assert_succeeded, init_app};

/// Every file under `dir` (relative path) and its bytes.
fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            files.insert(name, std::fs::read(&path).unwrap());
        }
    }
    files
}

#[test]
fn init_in_the_folder_holding_the_components_keeps_each_byte_for_byte() {
    let components = components_with(&["writer", "approval"]);
    let project = tempfile::tempdir().unwrap();
    crate::support::copy_folder(components.path(), &project.path().join("components"));
    std::fs::write(
        project.path().join("components/writer.toml"),
        "# the writer's grants\n",
    )
    .unwrap();
    let before = files_of(&project.path().join("components"));
    assert!(before["writer.wasm"].len() > 1000);

    let init = init_app(project.path(), Path::new("."), &[]);
    assert_succeeded(&init);

    let after = files_of(&project.path().join("components"));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &before {
        assert!(
            after[name] == *bytes,
            "{name}: {} bytes before, {} after",
            bytes.len(),
            after[name].len()
        );
    }
    // The rest of the app written beside them, their compiled code too.
    assert!(project.path().join("host.json").is_file());
    assert!(project
        .path()
        .join("agenthost-http/function.json")
        .is_file());
    assert!(project.path().join("components/.compiled/writer").is_dir());
    // Nothing of the staging left.
    let leftovers: Vec<_> = std::fs::read_dir(project.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|name| name.starts_with(".agenthost-init"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A second `init .` refuses (host.json is there) and changes nothing.
    let again = init_app(project.path(), Path::new("."), &[]);
    assert!(!again.status.success());
    assert_eq!(files_of(&project.path().join("components")), after);
}

#[test]
fn an_init_that_fails_leaves_no_folder() {
    let parent = tempfile::tempdir().unwrap();
    let entries = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect()
    };
    // No components folder.
    let app = parent.path().join("app");
    let missing = init_app(parent.path(), &app, &["--components", "no-such-folder"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no-such-folder"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    assert!(!app.exists());
    assert_eq!(entries(parent.path()), Vec::<String>::new());

    // A component that does not compile fails the compile step, after the
    // files were copied: still nothing left, the folders above it neither.
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("broken.wasm"), b"\0asm not really").unwrap();
    let nested = parent.path().join("deep/er/app");
    let failed = init_app(
        parent.path(),
        &nested,
        &["--components", &broken.path().display().to_string()],
    );
    assert!(!failed.status.success());
    assert_eq!(entries(parent.path()), Vec::<String>::new());
}
