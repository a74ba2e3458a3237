//! `agenthost functions init DIR`: a function app folder that runs this
//! binary as an Azure Functions custom handler.
//!
//! The Functions host starts the binary (`host.json`'s `customHandler`), on
//! the port it names in `FUNCTIONS_CUSTOMHANDLER_PORT` (which `serve`
//! reads), and forwards each HTTP request as it came
//! (`enableForwardingHttpRequest`; the route prefix is empty and the one
//! HTTP function's route is `{*path}`, so `/api/agents/{name}/run` keeps its
//! path and every route the host serves reaches it). A timer function,
//! `agenthost-wake`, starts a host while no request comes, so that timers
//! and take-overs due on a store nobody serves are run (its invocation is
//! posted to `/agenthost-wake`).
//!
//! A deployed app's folder is a read-only package: nothing the command line
//! names is written in it (the store is `--store` or the `AGENTHOST_STORE`
//! app setting, compiled code goes to `--cache-dir` or the user's cache).
//! `init` writes the folder all or nothing (see [`staging`]) and never
//! copies a file onto itself.

mod files;
mod staging;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use files::{executable_name, write_json, HTTP_FUNCTION, LOCAL_SETTINGS, WAKE_FUNCTION};

/// What `functions init` is given.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct InitArgs {
    /// The function app folder to write (new, or one without a host.json:
    /// `init .` in a folder holding `components/` keeps them as they are).
    pub dir: PathBuf,
    /// The components to serve: copied into DIR/components.
    #[arg(long, default_value = "components")]
    pub components: PathBuf,
    /// The store the app's hosts share (`postgres://…` for more than one
    /// instance), written into host.json; default: none there, the app
    /// setting `AGENTHOST_STORE` names it (local.settings.json: a SQLite
    /// file, for `func start`).
    #[arg(long)]
    pub store: Option<String>,
    /// An absolute folder for compiled code (the host's `--cache-dir`);
    /// default: the user's cache folder (`$HOME/.cache/agenthost`), or a
    /// private temporary folder where that is not the user's alone.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// The Functions key a caller needs (`function`), or none
    /// (`anonymous`: then give the host keys of its own).
    #[arg(long, default_value = "function", value_parser = ["function", "anonymous", "admin"])]
    pub auth_level: String,
    /// How often the timer wakes a host (an NCRONTAB with seconds).
    #[arg(long, default_value = "0 */1 * * * *")]
    pub wake_schedule: String,
    /// The executable to copy in (default: this one).
    #[arg(long)]
    pub executable: Option<PathBuf>,
}

/// The top-level names `init` writes in the app folder.
fn written_names() -> [&'static str; 7] {
    [
        "host.json",
        LOCAL_SETTINGS,
        ".funcignore",
        executable_name(),
        HTTP_FUNCTION,
        WAKE_FUNCTION,
        "components",
    ]
}

/// Writes the app folder, or nothing: everything is checked first, written
/// beside it, then renamed into place.
pub(crate) async fn init(args: &InitArgs) -> anyhow::Result<()> {
    let plan = Plan::check(args)?;
    let staging = staging::Staging::new_in(&plan.existing_ancestor)?;
    let components = staging.path().join("components");
    std::fs::create_dir(&components)
        .with_context(|| format!("cannot create {}", components.display()))?;
    for file in &plan.component_files {
        let name = file.file_name().unwrap_or_default();
        std::fs::copy(file, components.join(name))
            .with_context(|| format!("cannot copy {}", file.display()))?;
    }
    let target = staging.path().join(executable_name());
    std::fs::copy(&plan.executable, &target)
        .with_context(|| format!("cannot copy {} into the app", plan.executable.display()))?;
    // Their compiled code beside them (`--load-precompiled`): an instance
    // the platform starts answers without compiling them first, on a
    // worker of the same CPU kind (another compiles, as without it).
    super::compile::compile(&components).await?;
    let state = files::State {
        store: args.store.as_deref(),
        cache_dir: args.cache_dir.as_deref(),
    };
    write_json(&staging.path().join("host.json"), &files::host_json(&state))?;
    write_json(
        &staging.path().join(HTTP_FUNCTION).join("function.json"),
        &files::http_function(&args.auth_level),
    )?;
    write_json(
        &staging.path().join(WAKE_FUNCTION).join("function.json"),
        &files::timer_function(&args.wake_schedule),
    )?;
    write_json(
        &staging.path().join(LOCAL_SETTINGS),
        &files::local_settings(args.store.is_some()),
    )?;
    std::fs::write(staging.path().join(".funcignore"), files::funcignore())
        .context("cannot write .funcignore")?;
    staging.install(&args.dir, plan.same_components)?;
    println!(
        "wrote the function app {} ({} components); run it with `func start` there \
         (its timer needs the storage account of {LOCAL_SETTINGS}'s AzureWebJobsStorage: \
         `UseDevelopmentStorage=true` is the Azurite emulator, started apart)",
        args.dir.display(),
        plan.wasm_count
    );
    Ok(())
}

/// What `init` will do, checked before anything is written.
struct Plan {
    /// The `.wasm` files (and their `NAME.toml`) to copy.
    component_files: Vec<PathBuf>,
    wasm_count: usize,
    executable: PathBuf,
    /// `--components` is DIR/components itself (`init .`): it stays.
    same_components: bool,
    /// DIR, or the nearest folder above it that exists: where the app is
    /// written first.
    existing_ancestor: PathBuf,
}

impl Plan {
    fn check(args: &InitArgs) -> anyhow::Result<Self> {
        let dir = &args.dir;
        if dir.join("host.json").exists() {
            bail!(
                "{} holds a host.json already: choose an empty folder",
                dir.display()
            );
        }
        if let Some(cache) = &args.cache_dir {
            if cache.is_relative() {
                bail!(
                    "--cache-dir {}: give an absolute folder (a relative one names a folder of the app's)",
                    cache.display()
                );
            }
        }
        let (component_files, wasm_count) = component_files(&args.components)?;
        let executable = match &args.executable {
            Some(path) => path.clone(),
            None => std::env::current_exe().context("cannot find this executable")?,
        };
        if !executable.is_file() {
            bail!("the executable {} is not a file", executable.display());
        }
        let target_components = dir.join("components");
        let same_components = match (
            args.components.canonicalize(),
            target_components.canonicalize(),
        ) {
            (Ok(from), Ok(to)) => from == to,
            _ => false,
        };
        if dir.exists() {
            if !dir.is_dir() {
                bail!("{} is not a folder", dir.display());
            }
            for name in written_names() {
                let path = dir.join(name);
                let kept = name == "components" && same_components;
                if !kept && path.symlink_metadata().is_ok() {
                    bail!(
                        "{} exists: init writes it (choose an empty folder, or remove it)",
                        path.display()
                    );
                }
            }
        }
        let existing_ancestor = existing_ancestor(dir)?;
        Ok(Self {
            component_files,
            wasm_count,
            executable,
            same_components,
            existing_ancestor,
        })
    }
}

/// The `.wasm` files (and their `NAME.toml` settings) of `from`, and how
/// many components.
fn component_files(from: &Path) -> anyhow::Result<(Vec<PathBuf>, usize)> {
    let entries = std::fs::read_dir(from)
        .with_context(|| format!("cannot read the components folder {}", from.display()))?;
    let mut files = Vec::new();
    let mut wasm = 0;
    for entry in entries {
        let path = entry?.path();
        let extension = path.extension().and_then(|e| e.to_str());
        if path.is_file() && matches!(extension, Some("wasm" | "toml")) {
            wasm += usize::from(extension == Some("wasm"));
            files.push(path);
        }
    }
    if wasm == 0 {
        bail!("{} holds no .wasm component", from.display());
    }
    files.sort();
    Ok((files, wasm))
}

/// `dir` if it exists, else the nearest folder above it that does.
fn existing_ancestor(dir: &Path) -> anyhow::Result<PathBuf> {
    let absolute =
        std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    absolute
        .ancestors()
        .find(|path| path.is_dir())
        .map(Path::to_path_buf)
        .with_context(|| format!("no folder above {} exists", dir.display()))
}
