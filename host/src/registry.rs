//! The live set of components and the agents they serve.
//!
//! One owner for "which agent name is served by which component". Readers take
//! a cheap snapshot; loading replaces entries under a short write lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::model::ToolSpec;
use crate::runtime::{AgentSpec, LoadedComponent, OrchestrationSpec, Runtime};

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

/// An orchestration as served, with the component that runs its code.
#[derive(Clone)]
pub struct ServedOrchestration {
    pub spec: OrchestrationSpec,
    pub component: Arc<LoadedComponent>,
}

/// What a `POST /api/{path}` means, when a component declared the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteTarget {
    /// Start the orchestration.
    Start { orchestration: String },
    /// Raise `event` on instance `instance_id`.
    Event { event: String, instance_id: String },
}

/// A file that could not be loaded, kept so operators can see why.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFailure {
    pub file: PathBuf,
    pub error: String,
}

#[derive(Default)]
struct Entries {
    /// Every loaded component, by file.
    components: BTreeMap<PathBuf, Arc<LoadedComponent>>,
    agents: BTreeMap<String, ServedAgent>,
    orchestrations: BTreeMap<String, ServedOrchestration>,
    failures: Vec<LoadFailure>,
}

/// Refuses a name another component already serves: two owners for one URL
/// would be ambiguous.
fn claimed_elsewhere(
    kind: &str,
    name: &str,
    owner: Option<&Arc<LoadedComponent>>,
    component: &LoadedComponent,
) -> Option<String> {
    let existing = owner.filter(|o| o.path != component.path)?;
    Some(format!(
        "{kind} '{name}' is already served by {}; not serving it from {}",
        existing.path.display(),
        component.path.display()
    ))
}

#[derive(Default)]
pub struct Registry {
    entries: RwLock<Entries>,
}

impl Registry {
    /// Loads every `*.wasm` in `dir`, compiling them in parallel. A file that
    /// fails is logged with its name and reason and skipped; the others are
    /// served. Files are added in name order, so which of two files claiming
    /// one agent name wins does not depend on compile speed.
    pub async fn load_dir(&self, runtime: &Arc<Runtime>, dir: &Path) -> std::io::Result<()> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        if files.is_empty() {
            tracing::warn!(dir = %dir.display(), "no .wasm components found; nothing is served");
        }
        let loads: Vec<_> = files
            .iter()
            .map(|file| {
                let (runtime, file) = (runtime.clone(), file.clone());
                tokio::spawn(async move { runtime.load(&file).await })
            })
            .collect();
        for (file, load) in files.into_iter().zip(loads) {
            match load.await {
                Ok(Ok(component)) => self.add(component),
                Ok(Err(e)) => {
                    tracing::error!(file = %file.display(), error = %e, "component failed to load");
                    self.record_failure(file, e.to_string());
                }
                Err(e) => self.record_failure(file, format!("the load task failed: {e}")),
            }
        }
        Ok(())
    }

    /// Serves the component's agents. An agent name already served by another
    /// component is refused: two owners for one URL would be ambiguous.
    pub fn add(&self, component: Arc<LoadedComponent>) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries
            .components
            .insert(component.path.clone(), component.clone());
        let mut served = Vec::new();
        let mut refused = Vec::new();
        for spec in &component.manifest.agents {
            let owner = entries.agents.get(&spec.name).map(|a| &a.component);
            if let Some(error) = claimed_elsewhere("agent", &spec.name, owner, &component) {
                refused.push(error);
                continue;
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
        for spec in &component.manifest.orchestrations {
            let owner = entries.orchestrations.get(&spec.name).map(|o| &o.component);
            if let Some(error) = claimed_elsewhere("orchestration", &spec.name, owner, &component) {
                refused.push(error);
                continue;
            }
            let served_orchestration = ServedOrchestration {
                spec: spec.clone(),
                component: component.clone(),
            };
            entries
                .orchestrations
                .insert(spec.name.clone(), served_orchestration);
            served.push(spec.name.as_str());
        }
        for error in refused {
            tracing::error!(component = %component.name, "{error}");
            entries.failures.push(LoadFailure {
                file: component.path.clone(),
                error,
            });
        }
        tracing::info!(
            component = %component.name,
            digest = %component.digest,
            from_cache = component.from_cache,
            load_ms = component.load_time.as_millis() as u64,
            serves = ?served,
            "component loaded"
        );
    }

    pub fn orchestration(&self, name: &str) -> Option<ServedOrchestration> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .orchestrations
            .get(name)
            .cloned()
    }

    /// Names of every served orchestration, sorted.
    pub fn orchestration_names(&self) -> Vec<String> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .orchestrations
            .keys()
            .cloned()
            .collect()
    }

    /// The declared route matching `path` (segments under `/api/`).
    pub fn route(&self, path: &str) -> Option<RouteTarget> {
        let path = path.trim_matches('/');
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        for (name, served) in &entries.orchestrations {
            if served.spec.routes.iter().any(|r| r == path) {
                return Some(RouteTarget::Start {
                    orchestration: name.clone(),
                });
            }
            for route in &served.spec.event_routes {
                if let Some(instance_id) = match_instance_route(&route.path, path) {
                    return Some(RouteTarget::Event {
                        event: route.event.clone(),
                        instance_id,
                    });
                }
            }
        }
        None
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

    /// Every loaded component, by file name.
    pub fn components(&self) -> Vec<Arc<LoadedComponent>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .components
            .values()
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

/// Matches `approval/{instanceId}` against `approval/abc`, giving `abc`.
fn match_instance_route(pattern: &str, path: &str) -> Option<String> {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    if pattern.len() != path.len() {
        return None;
    }
    let mut instance = None;
    for (p, s) in pattern.iter().zip(&path) {
        if *p == "{instanceId}" {
            if s.is_empty() {
                return None;
            }
            instance = Some(s.to_string());
        } else if p != s {
            return None;
        }
    }
    instance
}

#[cfg(test)]
mod tests {
    use super::match_instance_route;

    #[test]
    fn instance_routes_capture_the_id() {
        assert_eq!(
            match_instance_route("approval/{instanceId}", "approval/abc"),
            Some("abc".into())
        );
        assert_eq!(
            match_instance_route("approval/{instanceId}", "approval"),
            None
        );
        assert_eq!(
            match_instance_route("approval/{instanceId}", "other/abc"),
            None
        );
        assert_eq!(
            match_instance_route("a/{instanceId}/b", "a/x/b"),
            Some("x".into())
        );
    }
}
