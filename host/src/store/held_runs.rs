//! Runs whose start is held back until their first write, so that a run
//! nobody else can know of costs one commit instead of two.
//!
//! A caller that waits for the whole answer on a session minted for it
//! (`POST /run` without a session id) is told nothing before the answer: not
//! the session, not the run. Until then nobody can follow, cancel or
//! continue the run, and if the host dies the caller's connection drops with
//! nothing acknowledged. Storing the run's start first bought nothing a
//! caller could see, and cost a commit per run: the start is kept in memory
//! and committed with the run's first write, its end or a tool round, in one
//! transaction. A caller whose wait runs out is handed the run's id, so the
//! start is committed first ([`Store::release_run`]).
//!
//! On a shared hub the same holds: no other host can know a session minted
//! here, so none can be waiting to claim it, and the session is born this
//! host's at [`BORN_AT`], as a claim at its insert would leave it (the fence
//! [`Store::hold_run`] hands out). Until its start commits, the session is
//! this host's by being held ([`Store::holds_held`]), not by a row.

use std::sync::Arc;

use super::clock::now_ms;
use super::durable_records::{Write, Written};
use super::error::StoreError;
use super::group_commit::answered;
use super::open::{HeldStart, Store};
use super::records::{NewRun, RunRecord, RunStatus, SessionKey};
use super::run_writes::RunWrite;
use crate::core::fence::{SessionFence, BORN_AT};

impl Store {
    /// The start of `run` as [`Store::enqueue_run`] writes it (its message
    /// made storable), and the record of the run it stores.
    pub(super) fn start_of(
        run: &NewRun,
        expire_before: Option<i64>,
        now: i64,
    ) -> (Write, RunRecord) {
        let mut run = run.clone();
        if run.message.contains('\0') {
            run.message = super::sessions::storable(&run.message);
        }
        let record = RunRecord {
            correlation_id: run.correlation_id.clone(),
            agent: run.session.agent.clone(),
            thread_id: run.session.session_id.clone(),
            message: run.message.clone(),
            status: RunStatus::Pending,
            response_format: run.response_format.clone(),
            response: None,
            error: None,
            error_code: None,
            usage: None,
            created_at: now,
            updated_at: now,
            traceparent: run.traceparent.clone(),
            cancel_requested: false,
            caller: run.caller.clone(),
        };
        let start = Write::Run(RunWrite::Start { run, expire_before });
        (start, record)
    }

    /// Holds back the start of `run`, of a session nobody else knows yet
    /// (its id minted for this run): it is committed with the run's first
    /// write. The record as stored (pending) and, on a shared hub, the
    /// fence this host holds the session by; `None` where this host runs
    /// nothing (a front), and the run is to be enqueued.
    pub fn hold_run(&self, run: &NewRun) -> Option<(RunRecord, Option<SessionFence>)> {
        let now = now_ms();
        let fence = match self.shared() {
            None => None,
            Some(_) => Some(SessionFence {
                owner: self.owner_id()?.to_string(),
                epoch: BORN_AT,
                taken_at: now,
            }),
        };
        let (start, record) = Self::start_of(run, None, now);
        let held = Arc::new(HeldStart {
            session: run.session.clone(),
            start: tokio::sync::Mutex::new(Some(start)),
        });
        self.held()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.correlation_id.clone(), held);
        Some((record, fence))
    }

    /// Whether `session` is one this host holds the start of a run of: it
    /// is this host's, with no row yet (or one being committed) that says
    /// so. A scan: a host holds as many as it has callers waiting.
    pub(super) fn holds_held(&self, session: &SessionKey) -> bool {
        self.held()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|held| held.session == *session)
    }

    /// Commits the held start of the run, if it is held: its id is about to
    /// be handed out, or something other than the writer is to write of it.
    /// Once this returns, the run is stored.
    pub async fn release_run(&self, correlation_id: &str) -> Result<(), StoreError> {
        self.with_start(correlation_id, None).await.map(|_| ())
    }

    /// Commits a write of the run `correlation_id`: with its held start
    /// first, in one transaction, if it is held.
    pub(super) async fn commit_run(
        &self,
        correlation_id: &str,
        write: Write,
    ) -> Result<Written, StoreError> {
        self.with_start(correlation_id, Some(write))
            .await?
            .ok_or_else(|| StoreError::Write("the write went unanswered".into()))
    }

    /// Commits the run's held start, if it is, then `then`, in one
    /// transaction where the writer can. A start that fails is held again
    /// (the run's next write tries it again), and its failure is the
    /// write's: the write is not of a stored run.
    async fn with_start(
        &self,
        correlation_id: &str,
        then: Option<Write>,
    ) -> Result<Option<Written>, StoreError> {
        let entry = self
            .held()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(correlation_id)
            .cloned();
        // Whoever began committing the start holds this until it is
        // answered: after it, the run is stored (or the start held again).
        let mut slot = match &entry {
            Some(entry) => Some(entry.start.lock().await),
            None => None,
        };
        let Some(start) = slot.as_mut().and_then(|slot| slot.take()) else {
            return match then {
                Some(write) => self.committer().commit(write).await.map(Some),
                None => Ok(None),
            };
        };
        let mut writes = vec![start.clone()];
        writes.extend(then);
        let mut answers = self.committer().send_together(writes).into_iter();
        let (started, then) = (answers.next(), answers.next());
        let then = match then {
            Some(answer) => Some(answered(answer).await),
            None => None,
        };
        let started = match started {
            Some(answer) => answered(answer).await,
            None => Err(StoreError::Write("the start went unanswered".into())),
        };
        if let Err(e) = started {
            if let Some(slot) = slot.as_mut() {
                **slot = Some(start);
            }
            return Err(e);
        }
        self.held()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(correlation_id);
        then.transpose()
    }
}
