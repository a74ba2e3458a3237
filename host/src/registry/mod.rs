//! The live set of components and the agents they serve, and every component
//! version an orchestration instance may still replay on.
//!
//! One owner for "which agent name is served by which component". Readers take
//! a cheap snapshot; a sync of the components directory replaces entries under
//! a short write lock, so requests in flight keep the version they started on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Serialize;

mod activity_sets;
mod sync;
mod versions;
mod watch;

pub use activity_sets::ActivityLookup;
pub use versions::VersionError;
pub use watch::watch;

use crate::model::ToolSpec;
use crate::store::Store;
use crate::wasm::{AgentSpec, LoadedComponent, OrchestrationSpec, Runtime};

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
    /// Raise `event` on instance `instance_id`, if the instance is one of
    /// an orchestration `component` serves (see [`Registry::serves`]).
    Event {
        event: String,
        instance_id: String,
        component: String,
    },
}

/// A file whose latest version could not be loaded, kept so operators can see
/// why. The version loaded before it, if any, keeps serving.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFailure {
    pub file: PathBuf,
    pub error: String,
}

#[derive(Default, Clone)]
struct Entries {
    /// Every loaded component, by file.
    components: BTreeMap<PathBuf, Arc<LoadedComponent>>,
    /// The latest failed load of each file.
    failures: BTreeMap<PathBuf, LoadFailure>,
    /// Names refused because another component already serves them.
    conflicts: Vec<LoadFailure>,
    agents: BTreeMap<String, ServedAgent>,
    orchestrations: BTreeMap<String, ServedOrchestration>,
    /// The component an orchestration of another component reaches when it
    /// calls an activity by its bare name.
    activities: BTreeMap<String, ServedActivity>,
    /// What new instances pin of the above (kept in the store before these
    /// entries serve).
    activity_set: Option<Arc<activity_sets::ActivitySet>>,
}

/// An activity (tool) name, and the component that serves it to other
/// components' orchestrations.
#[derive(Clone)]
struct ServedActivity(Arc<LoadedComponent>);

impl Entries {
    /// Recomputes who serves which name after components were added, replaced
    /// or removed. A name stays with the file that served it before, so a newly
    /// dropped file can never take over an agent already served; other names
    /// go to files in name order.
    fn rebuild(&mut self) {
        let mut agents = BTreeMap::new();
        let mut orchestrations = BTreeMap::new();
        let mut activities = BTreeMap::new();
        let mut conflicts = Vec::new();
        for previous_owners_first in [true, false] {
            for component in self.components.values() {
                for spec in &component.manifest.agents {
                    let served = ServedAgent {
                        spec: spec.clone(),
                        component: component.clone(),
                    };
                    if owned_before(&self.agents, &spec.name, component) == previous_owners_first {
                        claim(&mut agents, &mut conflicts, "agent", &spec.name, served);
                    }
                }
                // A component's own agents and orchestrations always reach
                // its own activities; a name another component already
                // serves is refused for calls from other components (they
                // can still name it `component/activity`).
                for spec in &component.manifest.activities {
                    if owned_before(&self.activities, &spec.name, component)
                        == previous_owners_first
                    {
                        let served = ServedActivity(component.clone());
                        claim(
                            &mut activities,
                            &mut conflicts,
                            "activity",
                            &spec.name,
                            served,
                        );
                    }
                }
                for spec in &component.manifest.orchestrations {
                    let served = ServedOrchestration {
                        spec: spec.clone(),
                        component: component.clone(),
                    };
                    if owned_before(&self.orchestrations, &spec.name, component)
                        == previous_owners_first
                    {
                        claim(
                            &mut orchestrations,
                            &mut conflicts,
                            "orchestration",
                            &spec.name,
                            served,
                        );
                    }
                }
            }
        }
        for failure in &conflicts {
            tracing::error!(file = %failure.file.display(), "{}", failure.error);
        }
        self.agents = agents;
        self.orchestrations = orchestrations;
        self.activities = activities;
        self.conflicts = conflicts;
    }
}

/// Something served under a name by one component.
trait Served {
    fn component(&self) -> &Arc<LoadedComponent>;
}

impl Served for ServedAgent {
    fn component(&self) -> &Arc<LoadedComponent> {
        &self.component
    }
}

impl Served for ServedOrchestration {
    fn component(&self) -> &Arc<LoadedComponent> {
        &self.component
    }
}

impl Served for ServedActivity {
    fn component(&self) -> &Arc<LoadedComponent> {
        &self.0
    }
}

fn owned_before<T: Served>(
    previous: &BTreeMap<String, T>,
    name: &str,
    component: &LoadedComponent,
) -> bool {
    previous
        .get(name)
        .is_some_and(|p| p.component().path == component.path)
}

/// Serves `served` under `name` unless another component already does.
fn claim<T: Served>(
    map: &mut BTreeMap<String, T>,
    conflicts: &mut Vec<LoadFailure>,
    kind: &str,
    name: &str,
    served: T,
) {
    match map.get(name) {
        Some(owner) => conflicts.push(conflict(kind, name, owner.component(), served.component())),
        None => {
            map.insert(name.to_string(), served);
        }
    }
}

/// Two owners for one URL would be ambiguous: the second is refused.
fn conflict(
    kind: &str,
    name: &str,
    owner: &LoadedComponent,
    component: &LoadedComponent,
) -> LoadFailure {
    LoadFailure {
        file: component.path.clone(),
        error: format!(
            "{kind} '{name}' is already served by {}; not serving it from {}",
            owner.path.display(),
            component.path.display()
        ),
    }
}

/// The live set of components, plus every version instances may still need.
pub struct Registry {
    runtime: Arc<Runtime>,
    store: Store,
    dir: PathBuf,
    entries: RwLock<Entries>,
    /// Fingerprints of the files as last scanned; held for a whole sync so
    /// that two syncs never interleave.
    scanned: tokio::sync::Mutex<BTreeMap<PathBuf, sync::Fingerprint>>,
    versions: versions::Versions,
    known_sets: activity_sets::KnownSets,
    /// Each component with orchestrations, as it begins to serve: a replay
    /// check listens (a listener that lags checks everything served).
    began_serving: tokio::sync::broadcast::Sender<Arc<LoadedComponent>>,
}

impl Registry {
    /// A registry serving the components of `dir` (nothing until [`Registry::sync`]).
    pub fn new(runtime: Arc<Runtime>, store: Store, dir: PathBuf) -> Self {
        Self {
            runtime,
            store,
            dir,
            entries: RwLock::default(),
            scanned: tokio::sync::Mutex::default(),
            versions: versions::Versions::default(),
            known_sets: activity_sets::KnownSets::default(),
            began_serving: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// Tells of each component with orchestrations that begins to serve
    /// from now on (loaded or reloaded).
    pub fn began_serving(&self) -> tokio::sync::broadcast::Receiver<Arc<LoadedComponent>> {
        self.began_serving.subscribe()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn orchestration(&self, name: &str) -> Option<ServedOrchestration> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .orchestrations
            .get(name)
            .cloned()
    }

    /// Whether any served component has an activity of this bare name
    /// (approval-gated ones included): what no component has may be an SDK
    /// worker's.
    pub fn has_activity(&self, name: &str) -> bool {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .activities
            .contains_key(name)
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
                        component: served.component.name.clone(),
                    });
                }
            }
        }
        None
    }

    /// Whether orchestration `name` is served by component `component`: a
    /// component's event route reaches only the instances of its own
    /// orchestrations (an attacker's route `evil/{instanceId}` must not
    /// raise events on another component's instance). Names are served by
    /// one component at most, so the name's server decides.
    pub fn serves(&self, component: &str, name: &str) -> bool {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .orchestrations
            .get(name)
            .is_some_and(|served| served.component.name == component)
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

    /// The served component that offers activity `name` (`component/activity`
    /// names one), and the activity's own name; else why none can run it.
    /// An orchestration's own component is asked first, by the caller: this
    /// is for an activity of another component, in its current version.
    pub fn activity_provider(&self, name: &str) -> Result<(Arc<LoadedComponent>, String), String> {
        let components = self.components();
        if let Some((component, activity)) = name.split_once('/') {
            let Some(found) = components.iter().find(|c| c.name == component) else {
                return Err(format!(
                    "no served component is named '{component}' (activity '{name}')"
                ));
            };
            return offered(found.clone(), activity, name);
        }
        let owner = self
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .activities
            .get(name)
            .map(|served| served.0.clone());
        match owner {
            None => Err(format!(
                "no served component has an activity named '{name}'"
            )),
            Some(owner) => offered(owner, name, name),
        }
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

    /// The served component with this digest, if any. Called for every
    /// episode and activity, so it looks under the lock instead of copying
    /// the component list.
    fn served_version(&self, digest: &str) -> Option<Arc<LoadedComponent>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .components
            .values()
            .find(|c| c.digest == digest)
            .cloned()
    }

    /// Files whose latest version failed to load, and names refused.
    pub fn failures(&self) -> Vec<LoadFailure> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries
            .failures
            .values()
            .chain(&entries.conflicts)
            .cloned()
            .collect()
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

/// Why a tool that needs a human's approval is not run for another
/// component's orchestration: only its own agents' tool rounds ask a human.
/// Activity `activity` of `component` (called as `name`), if it declares it
/// and it may run for another component's orchestration: one that needs a
/// human's approval may not.
fn offered(
    component: Arc<LoadedComponent>,
    activity: &str,
    name: &str,
) -> Result<(Arc<LoadedComponent>, String), String> {
    match component.manifest.activity(activity) {
        Some(spec) if spec.approval == crate::wasm::Approval::AlwaysRequire => Err(gated(name)),
        Some(_) => Ok((component, activity.to_string())),
        None => Err(format!(
            "component '{}' has no activity named '{activity}'",
            component.name
        )),
    }
}

fn gated(name: &str) -> String {
    format!("activity '{name}' needs a human's approval before it runs: only an agent of its own component can call it")
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
