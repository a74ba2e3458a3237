//! The rules of the house that the compiler does not check, checked on the
//! source itself so that they stay true (docs/architecture.md explains them):
//! the layer table and no import circle (of modules, and of files), the
//! store's own layer table, the edge never reads the store, one file picks
//! HTTP statuses, and only the core interprets effects with a catch-all.

use std::collections::{BTreeMap, BTreeSet};
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
    &["store", "wasm", "model", "remote_agents"],
    &["registry", "taskhub", "sdk_workers"],
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

/// The first circle found by a depth-first walk from `node`, if any.
fn circle_from<T: Ord + Clone>(
    node: &T,
    edges: &BTreeMap<T, BTreeSet<T>>,
    path: &mut Vec<T>,
    done: &mut BTreeSet<T>,
) -> Option<Vec<T>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut circle = path[at..].to_vec();
        circle.push(node.clone());
        return Some(circle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.clone());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(circle) = circle_from(next, edges, path, done) {
            return Some(circle);
        }
    }
    path.pop();
    done.insert(node.clone());
    None
}

#[test]
fn no_two_modules_import_each_other_even_through_others() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to, _) in module_imports() {
        edges.entry(from).or_default().insert(to);
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let circle = circle_from(node, &edges, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "import circle: {}",
            circle.unwrap_or_default().join(" -> ")
        );
    }
}

/// The module path of a source file (`store/sessions.rs` → `store::sessions`,
/// `store/mod.rs` → `store`).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Code lines of `file` outside its `#[cfg(test)]` items (a test module, a
/// test-only statement or block). The source is formatted (`cargo fmt`), so
/// an item that does not end on its first line ends on the next line at its
/// own indentation that closes it (`}`, `);`, not `) -> T {`).
fn non_test_code(file: &Path) -> Vec<(usize, String)> {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut kept = Vec::new();
    let mut lines = code(file).into_iter();
    while let Some((n, line)) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            kept.push((n, line));
            continue;
        }
        let at = indent(&line);
        let mut first = true;
        for (_, item) in lines.by_ref() {
            let text = item.trim();
            if first && text.starts_with("#[") {
                continue; // the item's other attributes
            }
            let closes = !first
                && indent(&item) == at
                && text.starts_with(['}', ')', ']'])
                && !text.ends_with('{');
            let whole = text.ends_with(';')
                || text.ends_with('}') && text.matches('{').count() == text.matches('}').count();
            if closes || (first && whole) {
                break;
            }
            first = false;
        }
    }
    kept
}

/// One file importing another: the importing module, the module imported,
/// and where.
struct Import {
    from: Vec<String>,
    to: Vec<String>,
    file: PathBuf,
    line: usize,
}

/// Every import of a file of `src` through `crate::…` and `super::…` paths
/// (`super::super::…` too; a `use` group counts each of its members),
/// outside `#[cfg(test)]` items, resolved to the file it reaches (the
/// longest module of the path that is a file; the crate's root left out).
fn imports() -> Vec<Import> {
    let src = src();
    let mut modules = BTreeSet::new();
    for file in sources(&src) {
        if let Ok(relative) = file.strip_prefix(&src) {
            modules.insert(module_of(relative));
        }
    }
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|candidate| modules.contains(candidate))
    };
    let mut imports = Vec::new();
    for file in sources(&src) {
        let Ok(relative) = file.strip_prefix(&src) else {
            continue;
        };
        let me = module_of(relative);
        let mut text = String::new();
        let mut starts = Vec::new();
        for (n, line) in non_test_code(&file) {
            starts.push((text.len(), n));
            text.push_str(&line);
            text.push('\n');
        }
        let line_at = |at: usize| {
            let i = starts.partition_point(|(start, _)| *start <= at);
            starts[i.saturating_sub(1)].1
        };
        let mut paths: Vec<(usize, Vec<String>)> = Vec::new();
        for root in ["crate::", "super::"] {
            for (at, _) in text.match_indices(root) {
                if text[..at].ends_with("super::") || text[..at].ends_with("pub(in ") {
                    continue; // a link of a `super::super::…` chain, or a visibility
                }
                let mut base = Vec::new();
                let mut rest = &text[at + root.len()..];
                if root == "super::" {
                    let mut up = 1;
                    while let Some(next) = rest.strip_prefix("super::") {
                        up += 1;
                        rest = next;
                    }
                    base = me[..me.len().saturating_sub(up)].to_vec();
                }
                let path: String = rest
                    .chars()
                    .take_while(|c| {
                        c.is_alphanumeric()
                            || *c == '_'
                            || *c == ':'
                            || *c == '{'
                            || *c == ','
                            || *c == ' '
                            || *c == '\n'
                    })
                    .collect();
                let (head, group) = match path.split_once('{') {
                    Some((head, group)) => (head, Some(group)),
                    None => (path.as_str(), None),
                };
                let head: Vec<String> = head
                    .split("::")
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
                    .collect();
                let mut prefix = base;
                prefix.extend(head);
                match group {
                    Some(group) => {
                        for member in group.split(',') {
                            let mut full = prefix.clone();
                            full.extend(
                                member
                                    .split("::")
                                    .map(|s| s.trim().to_string())
                                    .filter(|s| !s.is_empty()),
                            );
                            paths.push((at, full));
                        }
                    }
                    None => paths.push((at, prefix)),
                }
            }
        }
        for (at, path) in paths {
            let Some(target) = resolve(&path) else {
                continue;
            };
            if target.is_empty() || target == me {
                continue;
            }
            imports.push(Import {
                from: me.clone(),
                to: target,
                file: file.clone(),
                line: line_at(at),
            });
        }
    }
    imports
}

/// The files each file of `src` imports ([`imports`]), leaving out imports
/// between a module and the modules inside it: a parent declares its
/// children and may re-export them, and a child may use its parent's items.
fn file_imports() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let inside = |a: &[String], b: &[String]| a.len() <= b.len() && b[..a.len()] == *a;
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for import in imports() {
        if inside(&import.to, &import.from) || inside(&import.from, &import.to) {
            continue;
        }
        edges.entry(import.from).or_default().insert(import.to);
    }
    edges
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let edges = file_imports();
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(circle) = circle_from(node, &edges, &mut Vec::new(), &mut done) {
            let names: Vec<String> = circle.iter().map(|m| m.join("/")).collect();
            panic!("files import each other: {}", names.join(" -> "));
        }
    }
}

/// The layers of `store/`, bottom up (docs/architecture.md describes them):
/// a file of the store imports files of its own layer or below, never
/// above. An entry is a file of `store/` (its name without `.rs`) or a
/// folder, a room taken whole (its files import each other freely, and
/// `no_two_files_import_each_other_even_through_others` keeps them out of
/// circles); `mod` is `store/mod.rs`, the store's face to the crate, so a
/// file below it that imports through it (`crate::store::Store`) imports
/// above itself.
const STORE_LAYERS: &[&[&str]] = &[
    // The ground: the error, the clock, the ids of new rows, hubs, the
    // embedded migrations, the rows as host types, the writer's health.
    &[
        "error",
        "clock",
        "keys",
        "hub",
        "migrations",
        "records",
        "writer_health",
    ],
    // The write model: what each write means, against the statements of
    // `Tx` and `RunTx`.
    &[
        "run_tx",
        "run_writes",
        "durable_records",
        "tx",
        "apply",
        "decided",
        "rewinds",
        "writes",
    ],
    // The committer's queue, which each dialect's writer loop drains.
    &["commit_queue"],
    // The dialects, which never import each other (STORE_DIALECTS).
    &["sqlite", "postgres"],
    // The committer, which starts the dialect's writer loop.
    &["group_commit"],
    // The store: opened on one database or the other.
    &["open"],
    // The store's calls.
    &[
        "approvals",
        "claims",
        "episodes",
        "held_runs",
        "hosts",
        "instances",
        "remote_tasks",
        "replay_checks",
        "retention",
        "run_control",
        "run_reads",
        "sessions",
        "streams",
        "tasks",
        "versions",
    ],
    // A reader of the hub for a process that serves none (`agenthost due`),
    // on the calls' queries.
    &["due"],
    // The face: declares the rest and re-exports what the crate uses.
    &["mod"],
    // Tests of the whole store (`#[cfg(test)]`), on both stores.
    &[
        "batch_equivalence",
        "front_runs",
        "run_batches",
        "step_writes",
    ],
];

/// The folders of one database each: the same layer, and neither imports
/// the other.
const STORE_DIALECTS: [&str; 2] = ["sqlite", "postgres"];

/// The entry of [`STORE_LAYERS`] a module belongs to, if it is the store's.
fn store_room(module: &[String]) -> Option<String> {
    if module.first().is_none_or(|first| first != "store") {
        return None;
    }
    Some(
        module
            .get(1)
            .map_or_else(|| "mod".to_string(), Clone::clone),
    )
}

#[test]
fn no_file_of_the_store_imports_one_above_it() {
    let layer_of = |room: &str| STORE_LAYERS.iter().position(|layer| layer.contains(&room));
    let src = src();
    let mut broken = Vec::new();
    let mut rooms = BTreeSet::new();
    for file in sources(&src.join("store")) {
        let Some(room) = file
            .strip_prefix(&src)
            .ok()
            .and_then(|relative| store_room(&module_of(relative)))
        else {
            continue;
        };
        if layer_of(&room).is_none() {
            broken.push(format!("{} is in no layer of STORE_LAYERS", file.display()));
        }
        rooms.insert(room);
    }
    for entry in STORE_LAYERS.iter().flat_map(|layer| layer.iter()) {
        if !rooms.contains(*entry) {
            broken.push(format!(
                "STORE_LAYERS names {entry}, no file or folder of store/"
            ));
        }
    }
    for import in imports() {
        let (Some(from), Some(to)) = (store_room(&import.from), store_room(&import.to)) else {
            continue;
        };
        if from == to {
            continue;
        }
        let at = format!("{}:{}", import.file.display(), import.line);
        if let (Some(f), Some(t)) = (layer_of(&from), layer_of(&to)) {
            if t > f {
                broken.push(format!(
                    "{at}: {from} imports {}, a layer above it",
                    import.to.join("::")
                ));
            }
        }
        if STORE_DIALECTS.contains(&from.as_str()) && STORE_DIALECTS.contains(&to.as_str()) {
            broken.push(format!("{at}: {from} imports {to}, the other database's"));
        }
    }
    broken.sort();
    broken.dedup();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
