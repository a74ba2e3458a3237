//! Which version of another component's activity an orchestration instance
//! calls: the one served when the instance started.
//!
//! An orchestration may call activities of other components. Replacing such
//! a component while instances run must not change, halfway through, what
//! they call (a step of version 1 followed by a step of version 2 of the
//! same tool is what pinning the instance's own component already prevents).
//! So the registry names each state of what it serves to other components'
//! orchestrations, an *activity set*: the digest of each component serving
//! activities, and the component each bare activity name reaches. A set is
//! named by its content and kept in the store before the versions it names
//! serve (a sync whose set cannot be kept changes nothing and is tried
//! again), and every new instance records the set current at its start; its
//! sub-orchestrations share it. A task then runs the activity in the version
//! its set pins: the one served now when it is the same, else a retired one,
//! else the bytes the store kept. A component (or a bare name) that appeared
//! after the instance started is in no pin and runs in its current version.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{offered, Entries, Registry};
use crate::store::StoreError;
use crate::wasm::LoadedComponent;

/// Why no component version can run an activity for an instance.
#[derive(Debug, thiserror::Error)]
pub enum ActivityLookup {
    /// Permanent: the task fails with this message.
    #[error("{0}")]
    Refused(String),
    /// Transient (the store, a version that cannot load now): the task runs
    /// again later.
    #[error("{0}")]
    Later(String),
}

/// What other components' orchestrations reach at one moment.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Pins {
    /// The version of each component serving activities, by name.
    components: BTreeMap<String, String>,
    /// The component each bare activity name reaches.
    owners: BTreeMap<String, String>,
}

/// A set of pins and its name.
#[derive(Debug)]
pub(super) struct ActivitySet {
    pub(super) id: String,
    pins: Pins,
}

impl ActivitySet {
    /// The set of what `entries` serve; `None` when no component serves
    /// activities.
    pub(super) fn of(entries: &Entries) -> Option<Self> {
        let components: BTreeMap<String, String> = entries
            .components
            .values()
            .filter(|c| !c.manifest.activities.is_empty())
            .map(|c| (c.name.clone(), c.digest.clone()))
            .collect();
        if components.is_empty() {
            return None;
        }
        let owners = entries
            .activities
            .iter()
            .map(|(name, served)| (name.clone(), served.0.name.clone()))
            .collect();
        let pins = Pins { components, owners };
        // 128 bits of the content's SHA-256: unique among the sets of one
        // store, and short in every instance row.
        let digest = crate::wasm::digest_of(pins.json().as_bytes());
        let hex = digest.trim_start_matches("sha256:");
        let id = format!("set:{}", hex.get(..32).unwrap_or(hex));
        Some(Self { id, pins })
    }

    fn parse(id: &str, json: &str) -> Result<Self, serde_json::Error> {
        Ok(Self {
            id: id.to_string(),
            pins: serde_json::from_str(json)?,
        })
    }
}

impl Pins {
    fn json(&self) -> String {
        // Maps of strings always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Sets already read, by id.
#[derive(Default)]
pub(super) struct KnownSets(Mutex<HashMap<String, Arc<ActivitySet>>>);

impl KnownSets {
    fn remember(&self, set: Arc<ActivitySet>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(set.id.clone(), set);
    }

    fn get(&self, id: &str) -> Option<Arc<ActivitySet>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }
}

impl Registry {
    /// The activity set an instance of component `own` starting now pins:
    /// none when `own` is the only component serving activities (its own
    /// are pinned with its version, and anything served later is in no pin
    /// anyway), which spares the common single-component case the column.
    pub fn current_activity_set(&self, own: &str) -> Option<String> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .activity_set
            .as_ref()
            .filter(|s| s.pins.components.keys().any(|name| name != own))
            .map(|s| s.id.clone())
    }

    /// Keeps the set of `next` in the store (before it serves) and puts it
    /// in `next`.
    pub(super) async fn keep_activity_set(&self, next: &mut Entries) -> Result<(), StoreError> {
        let set = ActivitySet::of(next).map(Arc::new);
        if let Some(set) = &set {
            self.store
                .save_activity_set(&set.id, &set.pins.json())
                .await?;
            self.known_sets.remember(set.clone());
        }
        next.activity_set = set;
        Ok(())
    }

    async fn activity_set(&self, id: &str) -> Result<Option<Arc<ActivitySet>>, ActivityLookup> {
        if let Some(set) = self.known_sets.get(id) {
            return Ok(Some(set));
        }
        let Some(json) = self
            .store
            .activity_set(id)
            .await
            .map_err(|e| ActivityLookup::Later(format!("activity set {id}: {e}")))?
        else {
            return Ok(None);
        };
        let set = Arc::new(ActivitySet::parse(id, &json).map_err(|e| {
            ActivityLookup::Refused(format!("activity set {id} is unreadable: {e}"))
        })?);
        self.known_sets.remember(set.clone());
        Ok(Some(set))
    }

    /// The component version that runs activity `name` (bare, or
    /// `component/activity`) of another component for an instance that
    /// pinned `set`, and the activity's own name.
    pub async fn pinned_activity_provider(
        &self,
        set: Option<&str>,
        name: &str,
    ) -> Result<(Arc<LoadedComponent>, String), ActivityLookup> {
        let current = || {
            self.activity_provider(name)
                .map_err(ActivityLookup::Refused)
        };
        let Some(id) = set else {
            return current();
        };
        let Some(set) = self.activity_set(id).await? else {
            tracing::warn!(
                set = id,
                "an instance's activity set is not kept; calling the served version"
            );
            return current();
        };
        let (component, activity) = match name.split_once('/') {
            Some((component, activity)) => (component, activity),
            None => match set.pins.owners.get(name) {
                Some(owner) => (owner.as_str(), name),
                None => return current(),
            },
        };
        let Some(digest) = set.pins.components.get(component) else {
            return current();
        };
        let version = self
            .version(digest)
            .await
            .map_err(|e| ActivityLookup::Later(e.to_string()))?
            .ok_or_else(|| {
                ActivityLookup::Refused(format!(
                    "the version of component '{component}' this instance started with ({digest}) is not kept"
                ))
            })?;
        offered(version, activity, name).map_err(ActivityLookup::Refused)
    }
}
