//! The live set of components and the agents they serve.
//!
//! One owner for "which agent name is served by which component". Readers take
//! a cheap snapshot; loading replaces entries under a short write lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::model::ToolSpec;
use crate::runtime::{AgentSpec, LoadedComponent, Runtime};

/// An agent as served: its declaration and the component that holds its tools.
#[derive(Clone)]
pub struct ServedAgent {
    pub spec: AgentSpec,
    pub component: Arc<LoadedComponent>,
}

impl ServedAgent {
    /// The tools offered to the model, with their JSON Schemas.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.spec
            .tools
            .iter()
            .filter_map(|name| self.component.manifest.activity(name))
            .map(|a| ToolSpec {
                name: a.name.clone(),
                description: a.description.clone(),
                parameters: a.parameters.clone(),
            })
            .collect()
    }
}

/// A file that could not be loaded, kept so operators can see why.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFailure {
    pub file: PathBuf,
    pub error: String,
}

#[derive(Default)]
struct Entries {
    agents: BTreeMap<String, ServedAgent>,
    failures: Vec<LoadFailure>,
}

#[derive(Default)]
pub struct Registry {
    entries: RwLock<Entries>,
}

impl Registry {
    /// Loads every `*.wasm` in `dir`. A file that fails is logged with its name
    /// and reason and skipped; the others are served.
    pub async fn load_dir(&self, runtime: &Runtime, dir: &Path) -> std::io::Result<()> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        if files.is_empty() {
            tracing::warn!(dir = %dir.display(), "no .wasm components found; no agents are served");
        }
        for file in files {
            match runtime.load(&file).await {
                Ok(component) => self.add(component),
                Err(e) => {
                    tracing::error!(file = %file.display(), error = %e, "component failed to load");
                    self.record_failure(file, e.to_string());
                }
            }
        }
        Ok(())
    }

    /// Serves the component's agents. An agent name already served by another
    /// component is refused: two owners for one URL would be ambiguous.
    pub fn add(&self, component: Arc<LoadedComponent>) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let mut served = Vec::new();
        for spec in &component.manifest.agents {
            if let Some(existing) = entries.agents.get(&spec.name) {
                if existing.component.path != component.path {
                    let error = format!(
                        "agent '{}' is already served by {}; not serving it from {}",
                        spec.name,
                        existing.component.path.display(),
                        component.path.display()
                    );
                    tracing::error!(component = %component.name, "{error}");
                    entries.failures.push(LoadFailure {
                        file: component.path.clone(),
                        error,
                    });
                    continue;
                }
            }
            entries.agents.insert(
                spec.name.clone(),
                ServedAgent {
                    spec: spec.clone(),
                    component: component.clone(),
                },
            );
            served.push(spec.name.as_str());
        }
        tracing::info!(
            component = %component.name,
            digest = %component.digest,
            from_cache = component.from_cache,
            load_ms = component.load_time.as_millis() as u64,
            agents = ?served,
            "component loaded"
        );
    }

    fn record_failure(&self, file: PathBuf, error: String) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.failures.push(LoadFailure { file, error });
    }

    pub fn agent(&self, name: &str) -> Option<ServedAgent> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .agents
            .get(name)
            .cloned()
    }

    /// Names of every served agent, sorted.
    pub fn agent_names(&self) -> Vec<String> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .agents
            .keys()
            .cloned()
            .collect()
    }

    pub fn failures(&self) -> Vec<LoadFailure> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .failures
            .clone()
    }
}
