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

/// The layer table of docs/architecture.md, bottom up: a module may import
/// modules of its own layer or below, never above.
const LAYERS: &[&[&str]] = &[
    &["core"],
    &["workers", "metrics", "telemetry"],
    &["store", "wasm", "model"],
    &["registry", "taskhub"],
    &["agents", "streams", "runs", "durable", "health", "settings"],
    &["http", "client"],
    &["embed", "server", "cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The crate's top-level modules each file of `src` imports (`crate::X`),
/// by the importing file's own top-level module.
fn module_imports() -> Vec<(String, String, PathBuf)> {
    let src = src();
    let mut imports = Vec::new();
    for file in sources(&src) {
        let Ok(relative) = file.strip_prefix(&src) else {
            continue;
        };
        let Some(first) = relative.components().next() else {
            continue;
        };
        let from = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        for (_, line) in code(&file) {
            for part in line.split("crate::").skip(1) {
                let to: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !to.is_empty() && to != from {
                    imports.push((from.clone(), to, file.clone()));
                }
            }
        }
    }
    imports
}

#[test]
fn every_module_sits_in_the_layer_table_and_imports_only_its_layer_or_below() {
    let mut broken = Vec::new();
    for (from, to, file) in module_imports() {
        if ["lib", "main", "house_rules"].contains(&from.as_str()) {
            continue;
        }
        match (layer_of(&from), layer_of(&to)) {
            (Some(f), Some(t)) if t <= f => {}
            (Some(_), Some(_)) => broken.push(format!(
                "{} imports {to}, a layer above {from}",
                file.display()
            )),
            (None, _) => broken.push(format!("{from} is in no layer of the table")),
            (_, None) => broken.push(format!(
                "{to} (imported by {}) is in no layer",
                file.display()
            )),
        }
    }
    broken.sort();
    broken.dedup();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn no_two_modules_import_each_other_even_through_others() {
    use std::collections::{BTreeMap, BTreeSet};
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to, _) in module_imports() {
        edges.entry(from).or_default().insert(to);
    }
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let circle = visit(node, &edges, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "import circle: {}",
            circle.unwrap_or_default().join(" -> ")
        );
    }
}
