//! `agenthost functions init DIR`: a function app folder that runs this
//! binary as an Azure Functions custom handler.
//!
//! The Functions host starts the binary (`host.json`'s `customHandler`), on
//! the port it names in `FUNCTIONS_CUSTOMHANDLER_PORT` (which `serve`
//! reads), and forwards each HTTP request of the routes the functions
//! declare as it came (`enableForwardingHttpRequest`; the route prefix is
//! empty, so `/api/agents/{name}/run` keeps its path). One HTTP function
//! per route family; a timer function, `agenthost-wake`, starts a host
//! while no request comes, so that timers and take-overs due on a store
//! nobody serves are run (its invocation is posted to `/agenthost-wake`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// The HTTP functions: name, route (under an empty prefix), methods.
const HTTP_FUNCTIONS: &[(&str, &str, &[&str])] = &[
    ("agents", "api/agents/{*path}", &["get", "post", "delete"]),
    ("orchestrators", "api/orchestrators/{*path}", &["post"]),
    ("health", "api/health/{*path}", &["get"]),
    (
        "durabletask",
        "runtime/webhooks/durabletask/{*path}",
        &["get", "post", "delete"],
    ),
    ("a2a", "a2a/{*path}", &["get", "post", "delete"]),
];

/// The timer function, and its route on the handler.
pub(crate) const WAKE_FUNCTION: &str = "agenthost-wake";

/// What `functions init` is given.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct InitArgs {
    /// The function app folder to write.
    pub dir: PathBuf,
    /// The components to serve: copied into DIR/components.
    #[arg(long, default_value = "components")]
    pub components: PathBuf,
    /// The store the app's hosts share (`postgres://…` for more than one
    /// instance); default: a SQLite file in the app folder (one instance).
    #[arg(long)]
    pub store: Option<String>,
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

/// Writes the app folder; refuses one that has a `host.json` already.
pub(crate) async fn init(args: &InitArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    if dir.join("host.json").exists() {
        bail!(
            "{} holds a host.json already: choose an empty folder",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir.join("components"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let copied = copy_components(&args.components, &dir.join("components"))?;
    let executable = match &args.executable {
        Some(path) => path.clone(),
        None => std::env::current_exe().context("cannot find this executable")?,
    };
    let target = dir.join(executable_name());
    std::fs::copy(&executable, &target)
        .with_context(|| format!("cannot copy {} into the app", executable.display()))?;
    // Their compiled code beside them (`--load-precompiled` below): an
    // instance the platform starts answers without compiling them first,
    // on a worker of the same CPU kind (another compiles, as without it).
    if copied > 0 {
        super::compile::compile(&dir.join("components")).await?;
    }
    write_json(&dir.join("host.json"), &host_json(args.store.as_deref()))?;
    for (name, route, methods) in HTTP_FUNCTIONS {
        write_json(
            &dir.join(name).join("function.json"),
            &http_function(route, methods, &args.auth_level),
        )?;
    }
    write_json(
        &dir.join(WAKE_FUNCTION).join("function.json"),
        &timer_function(&args.wake_schedule),
    )?;
    println!(
        "wrote the function app {} ({copied} components); run it with `func start` there",
        dir.display()
    );
    Ok(())
}

fn executable_name() -> &'static str {
    if cfg!(windows) {
        "agenthost.exe"
    } else {
        "agenthost"
    }
}

/// `host.json`: the custom handler (this binary, `serve`, on the app's
/// files), requests forwarded as they came, no route prefix.
pub(crate) fn host_json(store: Option<&str>) -> Value {
    let store = store.unwrap_or("sqlite://agenthost.db");
    json!({
        "version": "2.0",
        "logging": {"logLevel": {"default": "Information"}},
        "extensionBundle": {
            "id": "Microsoft.Azure.Functions.ExtensionBundle",
            "version": "[4.*, 5.0.0)"
        },
        "extensions": {"http": {"routePrefix": ""}},
        "customHandler": {
            "description": {
                "defaultExecutablePath": executable_name(),
                "workingDirectory": "",
                // The Functions host is the front: it checks its keys
                // (authLevel) and forwards with the app's own host name.
                "arguments": [
                    "serve", "--components", "components", "--watch", "false",
                    "--store", store, "--allowed-hosts", "*", "--load-precompiled"
                ]
            },
            "enableForwardingHttpRequest": true
        }
    })
}

fn http_function(route: &str, methods: &[&str], auth_level: &str) -> Value {
    json!({
        "bindings": [
            {
                "type": "httpTrigger",
                "direction": "in",
                "name": "req",
                "authLevel": auth_level,
                "methods": methods,
                "route": route
            },
            {"type": "http", "direction": "out", "name": "res"}
        ]
    })
}

fn timer_function(schedule: &str) -> Value {
    json!({
        "bindings": [
            {
                "type": "timerTrigger",
                "direction": "in",
                "name": "timer",
                "schedule": schedule,
                "runOnStartup": false
            }
        ]
    })
}

fn write_json(path: &Path, value: &Value) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Copies the `.wasm` files (and their `NAME.toml` settings) of `from`.
fn copy_components(from: &Path, to: &Path) -> anyhow::Result<usize> {
    let entries = std::fs::read_dir(from)
        .with_context(|| format!("cannot read the components folder {}", from.display()))?;
    let mut copied = 0;
    for entry in entries {
        let path = entry?.path();
        let wanted = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("wasm" | "toml")
        );
        if let (true, Some(name)) = (wanted, path.file_name()) {
            std::fs::copy(&path, to.join(name))
                .with_context(|| format!("cannot copy {}", path.display()))?;
            copied += usize::from(path.extension().is_some_and(|e| e == "wasm"));
        }
    }
    if copied == 0 {
        bail!("{} holds no .wasm component", from.display());
    }
    Ok(copied)
}
