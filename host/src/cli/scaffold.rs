//! `agenthost new agent|orchestration NAME [--lang rust|python|js]`: a
//! ready project for one component, with the guest SDK of its language
//! vendored into it (Rust: `vendor/`; Python: `agenthost/`; JavaScript:
//! `agenthost.js`) and the WIT it binds, so that it builds anywhere with
//! that language's toolchain: no sibling checkout of agenthost, no git
//! dependency, no package to publish first.

mod js;
mod python;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The language of a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
}

/// The WIT every language's SDK binds, as this binary serves it.
const WIT: &str = include_str!("../../../wit/agenthost.wit");

/// The guest SDK as this binary was built with it (and the WIT it binds).
const SDK_FILES: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        include_str!("../../../guests/rust/src/lib.rs"),
    ),
    (
        "src/component.rs",
        include_str!("../../../guests/rust/src/component.rs"),
    ),
    (
        "src/orchestration.rs",
        include_str!("../../../guests/rust/src/orchestration.rs"),
    ),
    (
        "src/tool.rs",
        include_str!("../../../guests/rust/src/tool.rs"),
    ),
    (
        "src/http.rs",
        include_str!("../../../guests/rust/src/http.rs"),
    ),
    ("wit/agenthost.wit", WIT),
];

/// The SDK's manifest outside this repository's workspace.
const SDK_MANIFEST: &str = r#"[package]
name = "agenthost-guest"
description = "Write agenthost agents and tools as WebAssembly components in a few lines of Rust (vendored by `agenthost new`)"
version = "0.1.0"
edition = "2021"
license = "MIT"

[dependencies]
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1"
wit-bindgen = "0.46"
wasip2 = "1"
"#;

/// What to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Agent,
    Orchestration,
}

/// Writes the project for `name` into `dir` (which must not exist or be
/// empty) and returns what it wrote.
pub(crate) fn create(
    kind: Kind,
    lang: Lang,
    name: &str,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} exists and is not empty: pick another name or --dir",
            dir.display()
        );
    }
    let ident = name.replace('-', "_");
    let files: Vec<(PathBuf, String)> = match lang {
        Lang::Rust => rust_files(kind, name, &ident),
        Lang::Python => python::files(kind, name, &ident)
            .into_iter()
            .chain([("wit/agenthost.wit".to_string(), WIT.to_string())])
            .map(|(p, t)| (PathBuf::from(p), t))
            .collect(),
        Lang::Js => js::files(kind, name, &ident)
            .into_iter()
            .chain([("wit/agenthost.wit".to_string(), WIT.to_string())])
            .map(|(p, t)| (PathBuf::from(p), t))
            .collect(),
    };
    let mut written = Vec::new();
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The Rust project: a cdylib crate and the SDK vendored under `vendor/`.
fn rust_files(kind: Kind, name: &str, ident: &str) -> Vec<(PathBuf, String)> {
    let code = match kind {
        Kind::Agent => AGENT.replace("{name}", name),
        Kind::Orchestration => ORCHESTRATION
            .replace("{name}", name)
            .replace("{ident}", ident),
    };
    let readme = match kind {
        Kind::Agent => AGENT_README,
        Kind::Orchestration => ORCHESTRATION_README,
    }
    .replace("{name}", name)
    .replace("{ident}", ident);
    let mut files: Vec<(PathBuf, String)> = vec![
        ("Cargo.toml".into(), MANIFEST.replace("{name}", name)),
        ("src/lib.rs".into(), code),
        ("README.md".into(), readme),
        (".gitignore".into(), "/target\n*.wasm\n".into()),
        (
            "vendor/agenthost-guest/Cargo.toml".into(),
            SDK_MANIFEST.into(),
        ),
    ];
    for (path, text) in SDK_FILES {
        // The SDK finds its WIT beside it here, not two folders up.
        let text = text.replace("path: \"../../wit\"", "path: \"wit\"");
        files.push((Path::new("vendor/agenthost-guest").join(path), text));
    }
    files
}

/// A name that is a crate name, a file stem and an agent's URL segment.
fn check_name(name: &str) -> anyhow::Result<()> {
    let good = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !good {
        bail!("'{name}' is not a component name: use 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter");
    }
    if RESERVED.contains(&name.replace('-', "_").as_str()) {
        bail!("'{name}' cannot be a component's name: it is a Rust keyword, a crate Rust reserves, a name the generated code uses, or one of the host's own routes");
    }
    Ok(())
}

/// Names that would not compile (keywords, crates Rust reserves, the
/// generated code's own functions) or not load (the host's own routes).
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "try",
    "gen",
    "std",
    "core",
    "alloc",
    "test",
    "proc_macro",
    "component",
    "tests",
    "agents",
    "health",
    "components",
    "orchestrators",
    "openapi_json",
];

const MANIFEST: &str = r##"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

# cdylib: the component; rlib: so that `cargo test` runs the tests natively.
[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
# The guest SDK, vendored by `agenthost new` (the version of the agenthost
# that made this project). `agenthost new` into an empty folder gives a
# newer one.
agenthost-guest = { path = "vendor/agenthost-guest" }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
schemars = "1"

[profile.release]
opt-level = "s"

# A project of its own, even inside another workspace.
[workspace]
"##;

const AGENT: &str = r##"//! The `{name}` agent, with one tool. `agenthost build` makes {name}.wasm;
//! drop it into a host's components directory and it is served at
//! POST /api/agents/{name}/run.

use agenthost_guest::{Agent, Component, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the `word_count` tool takes. Doc comments become the descriptions
/// the model sees in the tool's JSON Schema.
#[derive(Deserialize, JsonSchema)]
pub struct Text {
    /// The text whose words are counted.
    pub text: String,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct Count {
    pub words: usize,
}

pub fn word_count(input: Text) -> Result<Count, String> {
    Ok(Count {
        words: input.text.split_whitespace().count(),
    })
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("{name}")
                .description("Helps with texts")
                .instructions("You help with texts. Count words with the word_count tool.")
                .tool("word_count"),
        )
        .tool(Tool::new("word_count", "Counts the words of a text", word_count))
}

// Exported in the component only: `cargo test` builds natively.
#[cfg(target_arch = "wasm32")]
agenthost_guest::export!(component);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_count_counts_the_words() {
        let text = Text {
            text: "one two  three".into(),
        };
        assert_eq!(word_count(text), Ok(Count { words: 3 }));
    }
}
"##;

const ORCHESTRATION: &str = r##"//! The `{name}` orchestration: two steps with an agent, then a human's
//! approval racing a durable timer. `agenthost build` makes {name}.wasm;
//! drop it into a host's components directory, then
//! POST /api/{name}/run with {"topic": "tea"} starts it and
//! POST /api/{name}/approve/{instanceId} with `true` approves it.

use std::time::Duration;

use agenthost_guest::{Agent, Component, Context, Orchestration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The start request's body; a body that does not match its schema is
/// refused with 400 before anything runs.
#[derive(Deserialize, JsonSchema)]
pub struct Request {
    pub topic: String,
}

#[derive(Serialize)]
pub struct Outcome {
    pub draft: String,
    pub summary: String,
    pub approved: bool,
}

/// Straight-line code; every call through `ctx` is journaled, so after a
/// crash the host replays it to where it was.
fn {ident}(ctx: &Context, request: Request) -> Result<Outcome, String> {
    let draft = ctx
        .call_agent("{ident}_writer", format!("Write a short note about {}", request.topic))
        .wait()?;
    let summary = ctx
        .call_agent("{ident}_writer", format!("Summarize in one line: {draft}"))
        .wait()?;
    ctx.set_custom_status(&serde_json::json!({"state": "awaiting_approval", "draft": draft}));
    let approval = ctx.wait_for_event::<bool>("approval");
    let timeout = ctx.timer(Duration::from_secs(24 * 3600));
    let approved = ctx.when_any(&[&approval, &timeout]) == 0 && approval.wait()?;
    Ok(Outcome {
        draft,
        summary,
        approved,
    })
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("{ident}_writer")
                .description("Writes short notes")
                .instructions("You write short, plain notes."),
        )
        .orchestration(
            Orchestration::new("{name}", {ident})
                .route("{name}/run")
                .event_route("{name}/approve/{instanceId}", "approval")
                .input_schema::<Request>(),
        )
}

// Exported in the component only: `cargo test` builds natively.
#[cfg(target_arch = "wasm32")]
agenthost_guest::export!(component);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_read_from_the_start_body() {
        let request: Request = serde_json::from_str(r#"{"topic": "tea"}"#).unwrap();
        assert_eq!(request.topic, "tea");
    }
}
"##;

const AGENT_README: &str = r##"# {name}

An [agenthost](https://github.com/) agent with one tool (`word_count`).

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d 'call word_count with {"text": "one two three"}' localhost:7071/api/agents/{name}/run

With no model configured the host's offline model calls the tool a message
names (`call TOOL with {json}`) and answers with its result; set
`OPENAI_API_KEY` (or the Azure OpenAI settings) for a real model.
`cargo test` runs the tests natively; `agenthost tool call
/path/to/components/{name}.wasm word_count '{"text": "a b"}'` runs the tool in
the sandbox.
"##;

const ORCHESTRATION_README: &str = r##"# {name}

An [agenthost](https://github.com/) orchestration: two agent steps, then a
human's approval racing a one-day durable timer.

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d '{"topic": "tea"}' localhost:7071/api/{name}/run            # its statusQueryGetUri follows it
    curl -d 'true' localhost:7071/api/{name}/approve/INSTANCE_ID          # approves it

`cargo test` runs the tests natively.
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_crate_names_are_refused_and_a_used_folder_too() {
        for bad in [
            "",
            "Hello",
            "1st",
            "a b",
            "a/b",
            "é",
            "fn",
            "std",
            "component",
            "health",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let written = create(
            Kind::Agent,
            Lang::Rust,
            "hello-world",
            &dir.path().join("h"),
        )
        .unwrap();
        assert!(written
            .iter()
            .any(|p| p.ends_with("vendor/agenthost-guest/wit/agenthost.wit")));
        let lib = std::fs::read_to_string(dir.path().join("h/vendor/agenthost-guest/src/lib.rs"))
            .unwrap();
        assert!(
            lib.contains("path: \"wit\""),
            "the vendored SDK binds its own WIT"
        );
        let err = create(Kind::Agent, Lang::Rust, "again", &dir.path().join("h")).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
