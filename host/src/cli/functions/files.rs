//! The files of a function app folder, as the Azure Functions host reads
//! them: `host.json` (the custom handler's command line), one
//! `function.json` per function, and `local.settings.json` for `func start`.

use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};

/// The HTTP function: every path, every method, forwarded as it came. One
/// catch-all rather than a function per route, so a route a component
/// declares (`POST /api/writer/run`) reaches the host with no new function.
/// The Functions host keeps what starts with `admin` or `runtime` for
/// itself (it refuses a function route there): the host serves the
/// management API and MCP under `/api/runtime/…` as well, and hands out
/// URLs there when the Functions host started it.
pub(crate) const HTTP_FUNCTION: &str = "agenthost-http";
const HTTP_ROUTE: &str = "{*path}";
const HTTP_METHODS: &[&str] = &["get", "post", "put", "patch", "delete", "head", "options"];

/// The timer function, and its route on the handler.
pub(crate) const WAKE_FUNCTION: &str = "agenthost-wake";

/// What `func start` reads and a deployed app never does (Core Tools does
/// not publish it): the app settings of a local run.
pub(crate) const LOCAL_SETTINGS: &str = "local.settings.json";

/// The SQLite file a local run keeps its state in, when `init` was given
/// no store: kept out of a publish by `.funcignore`.
const LOCAL_STORE: &str = "sqlite://agenthost.db";

pub(crate) fn executable_name() -> &'static str {
    if cfg!(windows) {
        "agenthost.exe"
    } else {
        "agenthost"
    }
}

/// Where the handler keeps what it writes: the app folder is a read-only
/// package once deployed, so nothing here names a path in it.
pub(crate) struct State<'a> {
    /// `--store`, or none: then `AGENTHOST_STORE` (an app setting) decides.
    pub store: Option<&'a str>,
    /// `--cache-dir` (absolute), or none: the user's cache folder.
    pub cache_dir: Option<&'a Path>,
}

/// `host.json`: the custom handler (this binary, `serve`, on the app's
/// files), requests forwarded as they came, no route prefix.
pub(crate) fn host_json(state: &State) -> Value {
    let mut arguments: Vec<String> = ["serve", "--components", "components", "--watch", "false"]
        .map(String::from)
        .to_vec();
    if let Some(store) = state.store {
        arguments.extend([String::from("--store"), store.to_string()]);
    }
    if let Some(dir) = state.cache_dir {
        arguments.extend([String::from("--cache-dir"), dir.display().to_string()]);
    }
    // The Functions host is the front: it checks its keys (authLevel) and
    // forwards with the app's own host name.
    arguments.extend(["--allowed-hosts", "*", "--load-precompiled"].map(String::from));
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
                "arguments": arguments
            },
            "enableForwardingHttpRequest": true
        }
    })
}

pub(crate) fn http_function(auth_level: &str) -> Value {
    json!({
        "bindings": [
            {
                "type": "httpTrigger",
                "direction": "in",
                "name": "req",
                "authLevel": auth_level,
                "methods": HTTP_METHODS,
                "route": HTTP_ROUTE
            },
            {"type": "http", "direction": "out", "name": "res"}
        ]
    })
}

pub(crate) fn timer_function(schedule: &str) -> Value {
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

/// `local.settings.json`: a custom handler (`FUNCTIONS_WORKER_RUNTIME`),
/// and the storage account the timer trigger keeps its schedule in
/// (`UseDevelopmentStorage=true`: the Azurite emulator, started apart).
/// With no `--store`, a SQLite file in the folder: a local run's.
pub(crate) fn local_settings(store_given: bool) -> Value {
    let mut values = json!({
        "FUNCTIONS_WORKER_RUNTIME": "custom",
        "AzureWebJobsStorage": "UseDevelopmentStorage=true"
    });
    if !store_given {
        values["AGENTHOST_STORE"] = json!(LOCAL_STORE);
    }
    json!({"IsEncrypted": false, "Values": values})
}

/// `.funcignore`: what `func azure functionapp publish` leaves out.
pub(crate) fn funcignore() -> &'static str {
    "# A local run's state (local.settings.json is never published).\nagenthost.db\nagenthost.db-*\n"
}

pub(crate) fn write_json(path: &Path, value: &Value) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}
