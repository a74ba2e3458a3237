//! The rules of the house that the compiler does not check, checked on the
//! source itself so that they stay true (docs/architecture.md explains them):
//! the edge never reads the store, one file picks HTTP statuses, and only
//! the core interprets effects with a catch-all.

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Code lines (comments left out) of `file`.
fn code(file: &Path) -> Vec<(usize, String)> {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect()
}

#[test]
fn the_edge_reads_no_store_and_only_http_error_picks_a_status() {
    let mut broken = Vec::new();
    for file in sources(&src().join("http")) {
        let is_error = file.ends_with("http/error.rs");
        for (n, line) in code(&file) {
            let reads_store = line.contains(".store")
                || line.contains("store::") && !line.contains("store::StoreError");
            if reads_store || (!is_error && line.contains("StatusCode")) {
                broken.push(format!("{}:{n}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn only_the_core_matches_effects_with_a_catch_all() {
    let core = src().join("core");
    let mut broken = Vec::new();
    for file in sources(&src()) {
        if file.starts_with(&core) {
            continue;
        }
        let lines = code(&file);
        if !lines.iter().any(|(_, l)| l.contains("Effect::")) {
            continue;
        }
        for (n, line) in lines {
            let arm = line.trim_start();
            if arm.starts_with("_ =>") || arm.starts_with("other =>") {
                broken.push(format!("{}:{n}: {}", file.display(), line.trim()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_core_imports_nothing_of_the_crate_outside_the_core() {
    let mut broken = Vec::new();
    for file in sources(&src().join("core")) {
        for (n, line) in code(&file) {
            if let Some(path) = line.split("crate::").nth(1) {
                if !path.starts_with("core") {
                    broken.push(format!("{}:{n}: {}", file.display(), line.trim()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
