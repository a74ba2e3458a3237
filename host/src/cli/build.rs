//! `agenthost build [DIR] [--into COMPONENTS]`: builds the component
//! project in DIR, checks that it loads as a host would load it, and says
//! where it went. The language is told by the project's files: Rust
//! (`Cargo.toml`) builds for `wasm32-wasip2` (the plain target: a
//! component comes out of `cargo build` directly, with no `cargo component`
//! to install), Python (`app.py`) with componentize-py, JavaScript
//! (`app.js`, or TypeScript's `app.ts`) bundled by rolldown and built with
//! componentize-js.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;

use anyhow::{bail, Context};

const TARGET: &str = "wasm32-wasip2";

/// The world every SDK builds against (the component and its agents' settings).
const WORLD: &str = "agenthost-sdk-component";

/// The pinned guest toolchains, as the errors that ask for them say.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.19.3 rolldown@1.3.2";

pub(crate) async fn build(dir: &Path, into: Option<&Path>) -> anyhow::Result<()> {
    let manifest = dir.join("Cargo.toml");
    let (package, built) = if manifest.is_file() {
        (package_name(&manifest)?, cargo_build(&manifest).await?)
    } else if dir.join("app.py").is_file() {
        let name = project_name(dir, "pyproject.toml")?;
        let built = python_build(dir, &name).await?;
        (name, built)
    } else if let Some(entry) = ["app.js", "app.ts"]
        .into_iter()
        .find(|entry| dir.join(entry).is_file())
    {
        let name = project_name(dir, "package.json")?;
        let built = js_build(dir, &name, entry).await?;
        (name, built)
    } else {
        bail!(
            "{} has no Cargo.toml, app.py, app.js or app.ts: `agenthost build` builds component projects (`agenthost new` makes one)",
            dir.display()
        );
    };
    let runtime = crate::server::local_runtime()?;
    let (component, placed) = load_and_place(&runtime, &built, &package, into).await?;
    let names = |v: Vec<&str>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let manifest = &component.manifest;
    println!("built {}", placed.display());
    println!(
        "  agents: {}",
        names(manifest.agents.iter().map(|a| a.name.as_str()).collect())
    );
    println!(
        "  tools: {}",
        names(
            manifest
                .activities
                .iter()
                .map(|a| a.name.as_str())
                .collect()
        )
    );
    println!(
        "  orchestrations: {}",
        names(
            manifest
                .orchestrations
                .iter()
                .map(|o| o.name.as_str())
                .collect()
        )
    );
    Ok(())
}

/// Loads what was built as a host would, then, with `--into`, copies it
/// there. Its compiled code is then in this user's cache, which a plain
/// `serve` of the same user reads (no flag), so a host watching that folder
/// serves it without compiling (seconds for a Python or JavaScript
/// component); it is placed beside it too ([`crate::wasm::PRECOMPILED`]),
/// for a host on another cache (an image's first start) that is told to
/// load it (`--load-precompiled`).
async fn load_and_place(
    runtime: &crate::wasm::Runtime,
    built: &Path,
    package: &str,
    into: Option<&Path>,
) -> anyhow::Result<(std::sync::Arc<crate::wasm::LoadedComponent>, PathBuf)> {
    let component = runtime.load(built).await.with_context(|| {
        format!(
            "{} was built but does not load as a component",
            built.display()
        )
    })?;
    let Some(components) = into else {
        return Ok((component, built.to_path_buf()));
    };
    std::fs::create_dir_all(components)
        .with_context(|| format!("cannot create {}", components.display()))?;
    let target = components.join(format!("{package}.wasm"));
    // The compiled code first, so that a host watching the folder finds it
    // when the component appears.
    if let Err(e) = runtime.place_beside(&component, &target) {
        eprintln!("warning: {e:#}; a host will compile the component when it loads it");
    }
    // Written beside it, then renamed: a host watching the folder never
    // loads half a file.
    let partial = components.join(format!(".{package}.wasm.partial"));
    std::fs::copy(built, &partial)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &target)
        .with_context(|| format!("cannot write {}", target.display()))?;
    Ok((component, target))
}

fn package_name(manifest: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let parsed: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", manifest.display()))?;
    parsed
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .with_context(|| {
            format!(
                "{} names no [package] (a workspace?): pass the folder of the component's own crate",
                manifest.display()
            )
        })
}

/// `cargo build --release --target wasm32-wasip2`, its diagnostics on
/// stderr as usual; the `.wasm` it made, read from its artifact messages
/// (wherever `CARGO_TARGET_DIR` puts them). Dropped before it ends (`dev`
/// stopping mid-build), the build is killed: nothing waits for it.
async fn cargo_build(manifest: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // In a workspace cargo reports other members' artifacts too: only this
    // manifest's counts.
    let ours = std::fs::canonicalize(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let mut child = tokio::process::Command::new(&cargo)
        .args(["build", "--release", "--target", TARGET])
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    let mut wasm = None;
    if let Some(stdout) = child.stdout.take() {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Some(line) = lines
            .next_line()
            .await
            .context("cannot read cargo's output")?
        {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if message["reason"] != "compiler-artifact" {
                continue;
            }
            let from_here = message["manifest_path"]
                .as_str()
                .and_then(|p| std::fs::canonicalize(p).ok())
                .is_some_and(|p| p == ours);
            if !from_here {
                continue;
            }
            let is_cdylib = message["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
            let file = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"));
            if let (true, Some(file)) = (is_cdylib, file) {
                wasm = Some(PathBuf::from(file));
            }
        }
    }
    let status = child.wait().await.context("cargo did not finish")?;
    if !status.success() {
        bail!(
            "cargo build failed ({status}); if it says the {TARGET} target is missing: rustup target add {TARGET}"
        );
    }
    wasm.context("cargo built no .wasm: the package needs `crate-type = [\"cdylib\"]` in [lib]")
}

/// The component's name: `name` of `pyproject.toml`'s `[project]` or of
/// `package.json`, else the folder's name.
fn project_name(dir: &Path, file: &str) -> anyhow::Result<String> {
    let path = dir.join(file);
    let named = match std::fs::read_to_string(&path) {
        Ok(text) if file.ends_with(".toml") => toml::from_str::<toml::Table>(&text)
            .with_context(|| format!("{} is not TOML", path.display()))?
            .get("project")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .map(str::to_string),
        // A scoped npm name (`@acme/weather`) gives `weather`.
        Ok(text) => serde_json::from_str::<serde_json::Value>(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?
            .get("name")
            .and_then(|n| n.as_str())
            .map(|n| n.rsplit('/').next().unwrap_or(n).to_string()),
        Err(_) => None,
    };
    let name = named.or_else(|| {
        std::fs::canonicalize(dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
    });
    name.filter(|n| !n.is_empty() && !n.contains(['/', '\\']))
        .with_context(|| {
            format!(
                "cannot tell the component's name: give it in {}",
                path.display()
            )
        })
}

/// A tool of the project (`node_modules/.bin`, or its virtualenv
/// `.venv/bin`) or else of `PATH`.
fn find_tool(dir: &Path, name: &str) -> Option<PathBuf> {
    for local in ["node_modules/.bin", ".venv/bin"] {
        let local = dir.join(local).join(name);
        if local.is_file() {
            return Some(local);
        }
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

/// Runs `program` with its output on our stderr (stdout stays the build's
/// own report); killed if the build is dropped (`dev` stopping).
async fn run_tool(program: &Path, args: &[&std::ffi::OsStr], dir: &Path) -> anyhow::Result<()> {
    let status = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .status()
        .await
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", program.display());
    }
    Ok(())
}

/// componentize-py over `app.py`, with the project's folder (its vendored
/// `agenthost/` SDK) on the module path, against its `wit/`.
async fn python_build(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    // Absolute first: the tools run inside the project's folder, where a
    // path relative to ours would name another file.
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let tool = find_tool(&dir, "componentize-py").with_context(|| {
        let venv = dir.join(".venv");
        format!(
            "componentize-py is neither in {}/bin nor on PATH; install it where `agenthost build` looks:\n  python3 -m venv {}\n  {}/bin/pip install {COMPONENTIZE_PY}",
            venv.display(),
            venv.display(),
            venv.display()
        )
    })?;
    let out = dir.join("build").join(format!("{name}.wasm"));
    std::fs::create_dir_all(dir.join("build")).context("cannot create build/")?;
    let wit = dir.join("wit");
    run_tool(
        &tool,
        &[
            "-d".as_ref(),
            wit.as_os_str(),
            "-w".as_ref(),
            WORLD.as_ref(),
            "componentize".as_ref(),
            "-p".as_ref(),
            dir.as_os_str(),
            "app".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        &dir,
    )
    .await?;
    Ok(out)
}

/// rolldown bundles `entry` (`app.js`, or `app.ts`, whose types it strips
/// without checking them) and what it imports into one module (the host's
/// interfaces stay imports), then componentize-js makes the component, with
/// WASI's clocks, randomness and stdio (no HTTP).
async fn js_build(dir: &Path, name: &str, entry: &str) -> anyhow::Result<PathBuf> {
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let missing = |tool: &str| {
        format!(
            "{tool} is neither in {}/node_modules/.bin nor on PATH; install it where `agenthost build` looks:\n  cd {} && npm install --save-dev {COMPONENTIZE_JS}",
            dir.display(),
            dir.display()
        )
    };
    let rolldown = find_tool(&dir, "rolldown").with_context(|| missing("rolldown"))?;
    let componentize =
        find_tool(&dir, "componentize-js").with_context(|| missing("componentize-js"))?;
    std::fs::create_dir_all(dir.join("build")).context("cannot create build/")?;
    let bundle = dir.join("build/app.bundle.js");
    let out = dir.join("build").join(format!("{name}.wasm"));
    run_tool(
        &rolldown,
        &[
            dir.join(entry).as_os_str(),
            "--file".as_ref(),
            bundle.as_os_str(),
            "--format".as_ref(),
            "esm".as_ref(),
            "--external".as_ref(),
            "agenthost:host/durable@0.1.0,agenthost:host/logging@0.1.0,agenthost:host/types@0.1.0"
                .as_ref(),
        ],
        &dir,
    )
    .await?;
    let wit = dir.join("wit");
    run_tool(
        &componentize,
        &[
            bundle.as_os_str(),
            "--wit".as_ref(),
            wit.as_os_str(),
            "--world-name".as_ref(),
            WORLD.as_ref(),
            "--disable".as_ref(),
            "http".as_ref(),
            "fetch-event".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        &dir,
    )
    .await?;
    Ok(out)
}
