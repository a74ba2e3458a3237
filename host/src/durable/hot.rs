//! Hot instances: the state, journal and inbox of instances that ran
//! recently, kept in memory under a byte budget so that their next episode
//! reads nothing from the store. The store stays the write-ahead log: an
//! image only ever holds rows already committed, and dropping one (eviction,
//! a management operation, a commit that did not apply) costs a read, never
//! correctness.
//!
//! Inbox rows reach an image from the store's writer thread, right after the
//! batch that wrote them commits and before anything later is read or written
//! (see [`crate::store::InboxSink`]). An instance whose episode is under way
//! (it is *claimed*) collects them aside; they join its image when the
//! episode puts it back, unless the episode had read them already.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use lru::LruCache;

use crate::core::effects::Effect;
use crate::core::journal::{Entry, Event};
use crate::core::lifecycle::evolve::{evolve, Evolved};
use crate::store::{InboxRow, Loaded};

/// One instance's committed state, journal and unconsumed inbox rows.
#[derive(Debug, Clone)]
pub(super) struct HotInstance {
    pub loaded: Loaded,
    pub journal: Vec<(Entry, i64)>,
    /// Oldest first, timers not yet due included.
    pub inbox: Vec<InboxRow>,
}

/// What one inbox row costs in memory beyond its payload.
const ROW_OVERHEAD: usize = 96;

fn row_size(row: &InboxRow) -> usize {
    row.event.payload_len() + ROW_OVERHEAD
}

impl HotInstance {
    fn size(&self) -> usize {
        const OVERHEAD: usize = 512;
        usize::try_from(self.loaded.state.history.bytes).unwrap_or(usize::MAX)
            + self.loaded.input.len()
            + self.inbox.iter().map(row_size).sum::<usize>()
            + OVERHEAD
    }

    /// The inbox rows parked (kept in order, waking nothing) until a
    /// release: an episode passes them to the core as such.
    pub fn parked_rows(&self) -> HashSet<i64> {
        self.inbox
            .iter()
            .filter(|row| row.parked)
            .map(|row| row.id)
            .collect()
    }

    /// The instance after `effects` are committed, or `None` when they end
    /// its execution (its next state must come from the store).
    pub fn after(mut self, effects: &[Effect]) -> Option<Self> {
        for effect in effects {
            match evolve(&mut self.loaded.state, effect) {
                Evolved::Unchanged => {}
                Evolved::Consumed(rows) => {
                    let rows: HashSet<i64> = rows.iter().copied().collect();
                    self.inbox.retain(|row| !rows.contains(&row.id));
                }
                Evolved::Parked(rows) => {
                    let rows: HashSet<i64> = rows.iter().copied().collect();
                    for row in &mut self.inbox {
                        row.parked |= rows.contains(&row.id);
                    }
                }
                Evolved::Appended { entries, at } => {
                    self.journal
                        .extend(entries.iter().cloned().map(|e| (e, at)));
                }
                Evolved::Over => return None,
            }
        }
        Some(self)
    }
}

pub(super) struct HotInstances {
    budget: usize,
    /// Several hosts share the store: an event this host raised may have
    /// been preceded by one another host raised and whose notification has
    /// not come yet, so it is not taken from memory (see [`Self::deliver`]).
    shared: bool,
    inner: Mutex<Inner>,
}

struct Inner {
    /// The task hub, as the gauges name it.
    hub: Arc<str>,
    entries: LruCache<String, HotInstance>,
    bytes: usize,
    /// Inbox rows the images hold: counted as they come and go, so that the
    /// metric costs no walk over the images and no store read.
    rows: usize,
    /// Rows that arrived for claimed instances while their episode ran.
    claimed: HashMap<String, Vec<InboxRow>>,
    /// Images whose inbox lacks rows another host committed: their next
    /// episode reads the inbox again (nothing else of them changed).
    stale_inbox: HashSet<String>,
    /// Instances this host is creating (see [`HotInstances::expecting`]): the
    /// rows committed for them before they are seeded, and whether one of
    /// them must be read from the store instead.
    expected: HashMap<String, (Vec<InboxRow>, bool)>,
}

impl Inner {
    fn evict_past(&mut self, budget: usize) {
        while self.bytes > budget {
            match self.entries.pop_lru() {
                Some((_, evicted)) => self.remove(&evicted),
                None => break,
            }
        }
        self.publish();
    }

    /// An instance being created whose rows this host may not have seen
    /// all of: its image, once seeded, reads its inbox first.
    fn must_read(&mut self, id: &str) {
        if let Some((_, read)) = self.expected.get_mut(id) {
            *read = true;
        }
    }

    /// Accounts for an image taken out of `entries`.
    fn remove(&mut self, image: &HotInstance) {
        self.bytes = self.bytes.saturating_sub(image.size());
        self.rows = self.rows.saturating_sub(image.inbox.len());
    }

    fn publish(&self) {
        crate::metrics::hot_instances(&self.hub, self.entries.len(), self.rows);
    }
}

impl HotInstances {
    /// `budget` bytes at most (0 keeps nothing hot); `shared`: other hosts
    /// write to the same store; `hub`: the task hub's name.
    pub fn new(budget: usize, shared: bool, hub: &str) -> Self {
        Self {
            budget,
            shared,
            inner: Mutex::new(Inner {
                hub: hub.into(),
                entries: LruCache::unbounded(),
                bytes: 0,
                rows: 0,
                claimed: HashMap::new(),
                stale_inbox: HashSet::new(),
                expected: HashMap::new(),
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims an instance for an episode (only its worker runs one at a
    /// time): takes its image if it is hot, and from now on collects the rows
    /// that arrive for it. Claim before reading the instance from the store,
    /// so that no row committed after that read is missed.
    pub fn claim(&self, id: &str) -> Claim<'_> {
        let mut inner = self.inner();
        let image = inner.entries.pop(id);
        if let Some(image) = &image {
            inner.remove(image);
            inner.publish();
        }
        let inbox_stale = inner.stale_inbox.remove(id) && image.is_some();
        inner.claimed.insert(id.to_string(), Vec::new());
        Claim {
            hot: self,
            id: id.to_string(),
            image,
            inbox_stale,
            open: true,
        }
    }

    /// Rows just committed to inboxes: they join hot images, or the rows
    /// collected for claimed instances; rows of cold instances are left to
    /// the store.
    ///
    /// On a shared hub a raised event instead makes the instance's next
    /// episode read its inbox again: another host may have committed an
    /// event before this one was even raised (acknowledged to a caller who
    /// then raised this one here) and its notification not have come yet.
    /// Taken from memory, this event would run ahead of that older row; read
    /// from the store, the two come in the order they were acknowledged.
    /// Results and timers have no such order to keep and join the image.
    pub fn deliver(&self, rows: Vec<(String, InboxRow)>) {
        let mut inner = self.inner();
        for (id, row) in rows {
            let raised = matches!(row.event, Event::EventRaised { .. });
            if let Some((collected, read)) = inner.expected.get_mut(&id) {
                match self.shared && raised {
                    true => *read = true,
                    false => collected.push(row),
                }
                continue;
            }
            if self.shared && raised {
                if inner.claimed.contains_key(&id) || inner.entries.contains(&id) {
                    inner.stale_inbox.insert(id);
                }
                continue;
            }
            if let Some(collected) = inner.claimed.get_mut(&id) {
                collected.push(row);
            } else if let Some(image) = inner.entries.peek_mut(&id) {
                let size = row_size(&row);
                image.inbox.push(row);
                inner.bytes += size;
                inner.rows += 1;
            }
        }
        inner.evict_past(self.budget);
    }

    /// Collects the rows committed for `id`, which this host is about to
    /// create, until it is seeded: a row committed in the start's own batch,
    /// or before the starter seeds it (an event raised at once), would
    /// otherwise reach no image, and one raised later would join the image
    /// ahead of it. Call before the start is written; the expectation ends
    /// with the returned guard.
    pub fn expecting(&self, id: &str) -> Expecting<'_> {
        self.inner()
            .expected
            .insert(id.to_string(), (Vec::new(), false));
        Expecting {
            hot: self,
            id: id.to_string(),
        }
    }

    /// Keeps an instance this host just created (and committed) hot from
    /// the start: its first episode then reads nothing of it, but for its
    /// inbox when it was not expected (a child an episode created, an
    /// entity), whose rows committed before now reached no image. Left
    /// alone if an image or an episode of it is there already.
    pub fn seed(&self, loaded: Loaded) {
        let mut inner = self.inner();
        let id = loaded.state.id.clone();
        let expected = inner.expected.remove(&id);
        if inner.entries.contains(&id) || inner.claimed.contains_key(&id) {
            return;
        }
        let (inbox, read) = expected.unwrap_or((Vec::new(), true));
        let image = HotInstance {
            loaded,
            journal: Vec::new(),
            inbox,
        };
        let size = image.size();
        if size > self.budget {
            return;
        }
        if read {
            inner.stale_inbox.insert(id.clone());
        }
        inner.rows += image.inbox.len();
        inner.entries.put(id, image);
        inner.bytes += size;
        inner.evict_past(self.budget);
    }

    /// Another host committed inbox rows for `id` and nothing else: an
    /// image at rest keeps its state and journal, and its next episode
    /// reads the inbox again; an episode under way cannot put its image
    /// back (what it read may lack the rows). True when it was hot or under
    /// way here: this host runs it.
    pub fn inbox_changed(&self, id: &str) -> bool {
        let mut inner = self.inner();
        inner.must_read(id);
        if inner.entries.contains(id) {
            inner.stale_inbox.insert(id.to_string());
            return true;
        }
        inner.claimed.remove(id).is_some()
    }

    /// Forgets an instance whose state changed outside its episodes. An
    /// episode under way then cannot put its image back either. True when
    /// it was hot or under way here: this host runs it.
    pub fn forget(&self, id: &str) -> bool {
        let mut inner = self.inner();
        inner.must_read(id);
        let image = inner.entries.pop(id);
        let had = image.is_some();
        inner.stale_inbox.remove(id);
        if let Some(image) = image {
            inner.remove(&image);
            inner.publish();
        }
        inner.claimed.remove(id).is_some() || had
    }

    /// Forgets every image (notifications of other hosts' writes were lost).
    pub fn clear(&self) {
        let mut inner = self.inner();
        inner.entries.clear();
        inner.bytes = 0;
        inner.rows = 0;
        inner.claimed.clear();
        inner.stale_inbox.clear();
        for (_, read) in inner.expected.values_mut() {
            *read = true;
        }
        inner.publish();
    }

    /// Sets the gauges again (for a scrape: a gauge nothing has set since
    /// the start is otherwise missing).
    pub fn publish(&self) {
        self.inner().publish();
    }

    /// (instances, bytes) held now.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let inner = self.inner();
        (inner.entries.len(), inner.bytes)
    }

    /// Inbox rows held now, as counted for the metric.
    #[cfg(test)]
    fn rows(&self) -> usize {
        self.inner().rows
    }
}

/// An instance claimed for one episode. Dropped without [`Claim::put`],
/// it releases the instance and the rows collected for it (the store has
/// them: the next episode reads them there).
pub(super) struct Claim<'a> {
    hot: &'a HotInstances,
    id: String,
    /// The hot image, if there was one (the episode takes it).
    pub image: Option<HotInstance>,
    /// Its inbox lacks rows another host committed: read it again.
    pub inbox_stale: bool,
    open: bool,
}

impl Claim<'_> {
    /// Keeps the instance hot after a committed episode (or one that wrote
    /// nothing) that started from the inbox rows `read`: rows collected
    /// meanwhile join the image unless the episode had read them already.
    /// They follow what it holds in the order they were committed: ids do
    /// not give that order on a shared hub (each host's come from its own
    /// block), and a collected row was committed after every row the image
    /// holds but did not read.
    pub fn put(mut self, mut image: HotInstance, read: &HashSet<i64>) {
        self.open = false;
        let mut inner = self.hot.inner();
        // Forgotten meanwhile (a management operation): the store decides.
        let Some(collected) = inner.claimed.remove(&self.id) else {
            return;
        };
        let present: HashSet<i64> = image.inbox.iter().map(|row| row.id).collect();
        image.inbox.extend(
            collected
                .into_iter()
                .filter(|row| !read.contains(&row.id) && !present.contains(&row.id)),
        );
        let size = image.size();
        if size > self.hot.budget {
            return;
        }
        let rows = image.inbox.len();
        if let Some(old) = inner.entries.put(self.id.clone(), image) {
            inner.remove(&old);
        }
        inner.bytes += size;
        inner.rows += rows;
        inner.evict_past(self.hot.budget);
    }
}

/// An instance this host is creating, until it is seeded (or its start
/// failed): see [`HotInstances::expecting`].
pub(super) struct Expecting<'a> {
    hot: &'a HotInstances,
    id: String,
}

impl Drop for Expecting<'_> {
    fn drop(&mut self) {
        self.hot.inner().expected.remove(&self.id);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.open {
            let mut inner = self.hot.inner();
            inner.claimed.remove(&self.id);
            // No image goes back: the next episode reads the store anyway.
            inner.stale_inbox.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::{InstanceState, RuntimeStatus, Size};
    use crate::core::journal::{Call, Event};

    fn hot(id: &str, bytes: u64) -> HotInstance {
        HotInstance {
            loaded: Loaded {
                state: InstanceState {
                    id: id.into(),
                    status: RuntimeStatus::Running,
                    execution: 1,
                    parent: None,
                    history: Size { events: 0, bytes },
                    has_run: true,
                },
                name: "o".into(),
                digest: "d".into(),
                input: String::new(),
                created_at: 0,
                owner: None,
                traceparent: None,
                activity_set: None,
                start_at: None,
            },
            journal: Vec::new(),
            inbox: Vec::new(),
        }
    }

    fn row(id: i64) -> InboxRow {
        InboxRow {
            id,
            execution: 1,
            event: Event::TimerFired { task: 0 },
            visible_at: 0,
            parked: false,
        }
    }

    #[test]
    fn rows_another_host_added_keep_an_image_at_rest_but_not_one_under_way() {
        let hot_instances = HotInstances::new(1 << 20, false, "test");
        put(&hot_instances, "a", hot("a", 10));
        assert!(hot_instances.inbox_changed("a"), "hot here");
        let claim = hot_instances.claim("a");
        assert!(
            claim.image.is_some() && claim.inbox_stale,
            "kept, inbox to read"
        );
        let image = hot("a", 10);
        claim.put(image, &HashSet::new());
        let again = hot_instances.claim("a");
        assert!(again.image.is_some() && !again.inbox_stale, "read once");
        // Under way: what the episode read may lack the rows.
        assert!(hot_instances.inbox_changed("a"), "under way here");
        again.put(hot("a", 10), &HashSet::new());
        assert!(hot_instances.claim("a").image.is_none(), "not put back");
        assert!(!hot_instances.inbox_changed("elsewhere"), "not here");
    }

    #[test]
    fn on_a_shared_hub_an_event_raised_here_is_read_from_the_store_not_memory() {
        let raised = |id: i64| InboxRow {
            event: Event::EventRaised {
                name: "e".into(),
                payload: "1".into(),
            },
            ..row(id)
        };
        let shared = HotInstances::new(1 << 20, true, "test");
        // At rest: the next episode reads the inbox, where another host's
        // older row (its notification still on the way) comes first.
        put(&shared, "rest", hot("rest", 10));
        shared.deliver(vec![("rest".into(), raised(5))]);
        let claim = shared.claim("rest");
        assert!(claim.image.is_some() && claim.inbox_stale, "read again");
        drop(claim);
        // Under way: the image goes back, and the episode after reads.
        put(&shared, "busy", hot("busy", 10));
        let claim = shared.claim("busy");
        shared.deliver(vec![("busy".into(), raised(6)), ("busy".into(), row(7))]);
        claim.put(hot("busy", 10), &HashSet::new());
        let claim = shared.claim("busy");
        assert!(claim.image.is_some() && claim.inbox_stale, "read again");
        drop(claim);
        // A result or a timer has no order to keep: it joins the image.
        put(&shared, "timer", hot("timer", 10));
        shared.deliver(vec![("timer".into(), row(8))]);
        let claim = shared.claim("timer");
        assert!(!claim.inbox_stale, "taken from memory");
        drop(claim);
        // One store, one host: the raise joins the image.
        let alone = HotInstances::new(1 << 20, false, "test");
        put(&alone, "a", hot("a", 10));
        alone.deliver(vec![("a".into(), raised(9))]);
        assert_eq!(inbox_of(&alone, "a"), Some(vec![9]));
    }

    #[test]
    fn rows_committed_before_a_new_instance_is_seeded_join_its_image() {
        let hot_instances = HotInstances::new(1 << 20, false, "test");
        // Expected: a row committed in the start's batch (or before the
        // starter seeded it) is in the image, ahead of a later one.
        let expecting = hot_instances.expecting("new");
        hot_instances.deliver(vec![("new".into(), row(1))]);
        hot_instances.seed(hot("new", 10).loaded);
        drop(expecting);
        hot_instances.deliver(vec![("new".into(), row(2))]);
        let claim = hot_instances.claim("new");
        assert!(!claim.inbox_stale, "nothing to read");
        assert_eq!(
            claim
                .image
                .as_ref()
                .map(|i| i.inbox.iter().map(|r| r.id).collect::<Vec<_>>()),
            Some(vec![1, 2])
        );
        drop(claim);
        // Not expected (a child an episode created): it reads its inbox.
        hot_instances.seed(hot("child", 10).loaded);
        assert!(hot_instances.claim("child").inbox_stale, "read first");
        // Another host's row while it is being created: read first too.
        let shared = HotInstances::new(1 << 20, true, "test");
        let expecting = shared.expecting("x");
        shared.inbox_changed("x");
        shared.seed(hot("x", 10).loaded);
        drop(expecting);
        assert!(shared.claim("x").inbox_stale, "read first");
        // A start that failed leaves nothing behind.
        drop(shared.expecting("failed"));
        assert!(shared.inner().expected.is_empty());
    }

    fn put(hot_instances: &HotInstances, id: &str, image: HotInstance) {
        hot_instances.claim(id).put(image, &HashSet::new());
    }

    fn inbox_of(hot_instances: &HotInstances, id: &str) -> Option<Vec<i64>> {
        let image = hot_instances.claim(id).image.take()?;
        Some(image.inbox.iter().map(|r| r.id).collect())
    }

    #[test]
    fn the_least_recently_used_are_evicted_past_the_budget() {
        let hot_instances = HotInstances::new(3 * 1_512, false, "test");
        for id in ["a", "b", "c", "d"] {
            put(&hot_instances, id, hot(id, 1_000));
        }
        assert_eq!(hot_instances.held(), (3, 3 * 1_512));
        assert!(
            inbox_of(&hot_instances, "a").is_none(),
            "the oldest went first"
        );
        assert!(inbox_of(&hot_instances, "d").is_some());
        assert_eq!(hot_instances.held(), (2, 2 * 1_512));
        // The rows counted leave with the images that held them.
        hot_instances.deliver(vec![("b".into(), row(1)), ("c".into(), row(2))]);
        assert_eq!(hot_instances.rows(), 2);
        hot_instances.forget("b");
        assert_eq!(hot_instances.rows(), 1);
        hot_instances.deliver((3..100).map(|id| ("c".to_string(), row(id))).collect());
        assert_eq!(hot_instances.held().0, 0, "past the budget: evicted");
        assert_eq!(hot_instances.rows(), 0);
    }

    #[test]
    fn committed_rows_reach_hot_and_claimed_instances_once() {
        let hot_instances = HotInstances::new(1 << 20, false, "test");
        put(&hot_instances, "hot", hot("hot", 0));
        hot_instances.deliver(vec![("hot".into(), row(1)), ("cold".into(), row(2))]);
        assert_eq!(hot_instances.rows(), 1, "a cold instance's row is not held");
        assert_eq!(inbox_of(&hot_instances, "hot"), Some(vec![1]));
        assert_eq!(
            hot_instances.rows(),
            0,
            "a claimed image's rows left with it"
        );
        assert_eq!(inbox_of(&hot_instances, "cold"), None, "left to the store");

        // An episode read rows 3 and 4 (say from the store, cold); 4 and 5
        // were committed after it claimed the instance.
        let claim = hot_instances.claim("a");
        hot_instances.deliver(vec![("a".into(), row(4)), ("a".into(), row(5))]);
        let mut image = hot("a", 0);
        image.inbox = vec![row(4)]; // 3 consumed, 4 not yet visible
        claim.put(image, &HashSet::from([3, 4]));
        assert_eq!(hot_instances.rows(), 2, "rows 4 and 5, once each");
        assert_eq!(inbox_of(&hot_instances, "a"), Some(vec![4, 5]));

        // On a shared hub ids are no order: a row another host committed
        // first (read, id 300) stays before this host's later one (id 8).
        let claim = hot_instances.claim("a");
        hot_instances.deliver(vec![("a".into(), row(8))]);
        let mut image = hot("a", 0);
        image.inbox = vec![row(300)];
        claim.put(image, &HashSet::from([300]));
        assert_eq!(inbox_of(&hot_instances, "a"), Some(vec![300, 8]));

        // A claim given up forgets what it collected: the store has it.
        let claim = hot_instances.claim("b");
        hot_instances.deliver(vec![("b".into(), row(6))]);
        drop(claim);
        hot_instances.deliver(vec![("b".into(), row(7))]);
        assert_eq!(inbox_of(&hot_instances, "b"), None);
        assert!(hot_instances.inner().claimed.is_empty());

        // Forgotten while claimed: the episode's image is not kept.
        let claim = hot_instances.claim("c");
        hot_instances.forget("c");
        claim.put(hot("c", 0), &HashSet::new());
        assert_eq!(inbox_of(&hot_instances, "c"), None);
    }

    #[test]
    fn committed_effects_update_the_image_and_an_ending_drops_it() -> Result<(), String> {
        let entries = vec![
            Entry::Event(Event::TimerFired { task: 0 }),
            Entry::Call(Call::Now { value: 1 }),
        ];
        let next = hot("a", 0).after(&[
            Effect::Append { entries, at: 7 },
            Effect::SetStatus {
                status: RuntimeStatus::Running,
                output: None,
                custom_status: None,
            },
        ]);
        let next = next.ok_or("a running instance stays hot")?;
        assert_eq!(next.journal.len(), 2);
        assert_eq!(next.journal[1].1, 7);
        assert_eq!(next.loaded.state.history.events, 2);
        let ended = next.after(&[Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: None,
            custom_status: None,
        }]);
        assert!(ended.is_none());
        Ok(())
    }
}
