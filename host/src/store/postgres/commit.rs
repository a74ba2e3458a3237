//! The PostgreSQL writer: a task with its own connection to the hub, taking
//! the same queue as the SQLite writer. Several hosts may write to one hub
//! at once; each write locks the rows of the instance it decides on, so
//! their decisions are serialized per instance by PostgreSQL itself. A
//! batch that gives instances something new tells the other hosts in the
//! same transaction (`NOTIFY`, delivered at commit).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::mpsc;

use super::batch::{fenced, plan, Care, FENCE_REFUSED};
use super::flush::{add_rows, Rows};
use super::ids::IdPool;
use super::marks::{committed_answers, mark, prune_marks, Backend};
use super::runs::{add_runs, set_based, RunParts};
use super::shared_hub::SharedHub;
use super::statement::{send, Statement, Tail};
use super::tx::{image, PgTx};
use crate::store::clock::now_ms;
use crate::store::commit_queue::{Job, Shared, Taken};
use crate::store::durable_records::{Read, ReadOut, Write, Written};
use crate::store::error::StoreError;
use crate::store::run_writes::{RunWrite, RunWritten};
use crate::store::writes::write_one;

/// How often a write that lost a deadlock or a serialization race to
/// another host is tried again, alone, before it fails.
const RETRIES: usize = 5;

pub(in crate::store) async fn start(
    options: PgConnectOptions,
    hub: Arc<SharedHub>,
    queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) -> Result<(), StoreError> {
    // The writer sends a few statements of fixed shapes, each prepared once
    // on its connection: planned once, not again for each batch (PostgreSQL
    // would otherwise plan the first five executions of each anew, and a
    // batch's statement again whenever its arrays change length enough).
    // Every one of them looks rows up by key, so they are planned as key
    // lookups whatever the tables' statistics say: a plan made once while
    // the hub is small (a hash join over a scan of `instances`) would
    // otherwise be kept for the connection's life, however large the
    // tables grow (no ANALYZE runs where autovacuum is off). No JIT: a
    // scan the planner cannot avoid (the few rows of `hosts`) is costed at
    // 10^10 once scans are off, far past `jit_above_cost`, and PostgreSQL
    // then compiled the whole batch's statement, half a second of one
    // core, for a statement that runs in a millisecond.
    let options = options.options([
        ("plan_cache_mode", "force_generic_plan"),
        ("jit", "off"),
        ("enable_seqscan", "off"),
        ("enable_hashjoin", "off"),
        ("enable_mergejoin", "off"),
    ]);
    let (connection, backend) = connect(&options).await?;
    tokio::spawn(write_loop(options, hub, connection, backend, queue, shared));
    Ok(())
}

/// A connection of the writer, and its server process.
async fn connect(options: &PgConnectOptions) -> Result<(PgConnection, Backend), StoreError> {
    let mut connection = PgConnection::connect_with(options).await?;
    let backend = Backend::of(&mut connection).await?;
    Ok((connection, backend))
}

async fn write_loop(
    options: PgConnectOptions,
    hub: Arc<SharedHub>,
    connection: PgConnection,
    backend: Backend,
    mut queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) {
    let mut writer = Writer {
        options,
        hub,
        connection: Some(connection),
        backend: Some(backend),
        batches: 0,
        ids: IdPool::default(),
    };
    let _alive = shared.health.guard();
    while let Some(job) = queue.recv().await {
        let taken = Taken::from(job, &mut queue);
        if !taken.writes.is_empty() {
            shared.health.batch_started();
            let (writes, replies): (Vec<_>, Vec<_>) = taken.writes.into_iter().unzip();
            let (batch, started) = (writes.len(), std::time::Instant::now());
            let results = writer.write_batch(writes).await;
            crate::metrics::commit(batch, started.elapsed());
            shared.answer(replies, results);
        }
        for (read, reply) in taken.reads {
            let _ = reply.send(writer.read(read).await);
        }
        if let Some(reply) = taken.close {
            shared.health.closed();
            queue.close();
            if let Some(connection) = writer.connection.take() {
                let _ = connection.close().await;
            }
            let _ = reply.send(());
            return;
        }
    }
}

struct Writer {
    options: PgConnectOptions,
    hub: Arc<SharedHub>,
    /// Dropped when it fails other than by a statement's own error, and
    /// opened again for the next batch.
    connection: Option<PgConnection>,
    /// The server process of the last connection opened.
    backend: Option<Backend>,
    /// Transactions committed, to prune old batch ids now and then.
    batches: u64,
    /// Inbox and execution ids reserved for planned batches.
    ids: IdPool,
}

/// How long one transaction of the writer may take before its connection
/// counts as gone (a silent partition sends no reset: without a deadline the
/// writer would wait for ever).
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// Pruned once every this many transactions.
const PRUNE_EVERY: u64 = 1_024;

impl Writer {
    async fn connection(&mut self) -> Result<&mut PgConnection, StoreError> {
        Ok(self.parts().await?.0)
    }

    /// The connection (opened again if it was dropped) and the reserved ids.
    async fn parts(&mut self) -> Result<(&mut PgConnection, &mut IdPool), StoreError> {
        if self.connection.is_none() {
            let (connection, backend) = connect(&self.options).await?;
            tracing::info!("the store's writer reconnected to PostgreSQL");
            self.connection = Some(connection);
            self.backend = Some(backend);
        }
        let connection = self
            .connection
            .as_mut()
            .ok_or_else(|| StoreError::Write("no connection".into()))?;
        Ok((connection, &mut self.ids))
    }

    /// Forgets a connection that broke (anything but a statement refused).
    fn check(&mut self, error: &StoreError) {
        if let StoreError::Query(e) = error {
            if !matches!(e, sqlx::Error::Database(_) | sqlx::Error::RowNotFound) {
                self.connection = None;
            }
        }
    }

    async fn read(&mut self, read: Read) -> Result<ReadOut, StoreError> {
        let result = tokio::time::timeout(CALL_DEADLINE, async {
            let Read::Image(id) = read;
            Ok(ReadOut::Image(image(self.connection().await?, &id).await?))
        })
        .await
        .unwrap_or_else(|_| {
            // A silent connection: dropped, the next call opens another.
            self.connection = None;
            Err(StoreError::Write(
                "no answer from PostgreSQL within the deadline".into(),
            ))
        });
        if let Err(e) = &result {
            self.check(e);
        }
        result
    }

    /// One transaction for the whole batch; if any write fails, the batch is
    /// rolled back and each write is tried alone, so that a failure spoils
    /// nothing else.
    async fn write_batch(&mut self, writes: Vec<Write>) -> Vec<Result<Written, StoreError>> {
        match self.try_batch(&writes).await {
            Ok(results) => results,
            Err(e) => {
                self.check(&e);
                let mut results = Vec::with_capacity(writes.len());
                for write in writes {
                    results.push(self.write_alone(write).await);
                }
                results
            }
        }
    }

    /// Episodes go under their fence first; if one did not hold (or a child
    /// it starts was not new), the batch is decided again on every instance
    /// read and locked.
    async fn try_batch(
        &mut self,
        writes: &[Write],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        match self.try_batch_with(writes, Care::Fenced).await {
            Ok(Some(results)) => return Ok(results),
            Ok(None) => {}
            Err(e) if moved_on(&e) => {
                tracing::debug!(error = %e, "a fenced write did not hold; the batch is decided again on what is stored");
                #[cfg(test)]
                super::batch::counts::MOVED_ON.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
        self.try_batch_with(writes, Care::Careful)
            .await?
            .ok_or_else(|| StoreError::Write("a careful batch was not written".into()))
    }

    /// A batch whose every write needs no read (episodes under their fence,
    /// starts, runs' writes in their set form) is one statement with no
    /// transaction around it; any other, a transaction. `None`: it needs a
    /// transaction after all (the statement path).
    async fn try_batch_with(
        &mut self,
        writes: &[Write],
        care: Care,
    ) -> Result<Option<Vec<Result<Written, StoreError>>>, StoreError> {
        let now = now_ms();
        let hub = self.hub.clone();
        let batch = self.batch_id();
        let prune = self.batches.is_multiple_of(PRUNE_EVERY);
        let fenced = fenced(writes, hub.owner(), care);
        let run_writes: Vec<&RunWrite> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Run(run) => Some(run),
                _ => None,
            })
            .collect();
        // A held run's start and end go as one insert under the fence only:
        // refused (its session was there after all), they go as any other.
        let wholes = care == Care::Fenced;
        let alone = set_based(&run_writes, wholes)
            && writes
                .iter()
                .zip(&fenced)
                .all(|(w, f)| *f || matches!(w, Write::Run(_)));
        let mut pending = None;
        let attempt = tokio::time::timeout(CALL_DEADLINE, async {
            let (connection, ids) = self.parts().await?;
            let batch = Batch {
                hub: &hub,
                writes,
                fenced: &fenced,
                now,
                id: &batch,
                prune,
                wholes,
            };
            if alone {
                return Ok(
                    match write_all(connection, ids, batch, false, &mut pending).await? {
                        // The one statement was the commit.
                        Sent::Written(committed) => committed,
                        Sent::NeedsTransaction => Ok(None),
                    },
                );
            }
            let mut tx = connection.begin().await?;
            let answers = match write_all(&mut tx, ids, batch, true, &mut pending).await? {
                Sent::Written(committed) => committed?,
                Sent::NeedsTransaction => {
                    return Err(StoreError::Write(
                        "a batch in a transaction asked for one".into(),
                    ))
                }
            };
            Ok::<_, StoreError>(tx.commit().await.map(|()| answers))
        })
        .await;
        let committed = self.settle(attempt)?;
        let answers = self.resolve(committed, &batch).await?;
        pending
            .map(|written| written.complete(answers.as_deref()))
            .transpose()
            .map(|results| results.map(|results| results.into_iter().map(Ok).collect()))
    }

    /// A transaction that ran past [`CALL_DEADLINE`] (the connection went
    /// silent: no reset, nothing flows) is abandoned with its connection;
    /// whether its COMMIT got through is then as unknown as when a COMMIT's
    /// answer is lost, and is resolved the same way.
    fn settle(
        &mut self,
        attempt: Result<Outcome, tokio::time::error::Elapsed>,
    ) -> Result<Committed, StoreError> {
        match attempt {
            Ok(statements) => statements,
            Err(_) => {
                self.connection = None;
                tracing::warn!(deadline = ?CALL_DEADLINE, "the store's writer got no answer from PostgreSQL in time; dropping the connection");
                Ok(Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer from PostgreSQL within the deadline",
                ))))
            }
        }
    }

    fn batch_id(&mut self) -> String {
        self.batches += 1;
        uuid::Uuid::new_v4().simple().to_string()
    }

    /// What a COMMIT did. One whose answer was lost with the connection
    /// may have committed: the database is asked, on a fresh connection,
    /// whether the batch's id is there once the transaction that wrote it
    /// has ended (the server may still be committing it when the answer is
    /// lost), and asked again until it answers,
    /// because writing the batch again would apply it twice (an event
    /// delivered twice, a start answered 409 by its own instance).
    async fn resolve(
        &mut self,
        committed: Committed,
        batch: &str,
    ) -> Result<Option<String>, StoreError> {
        let error = match committed {
            Ok(answers) => return Ok(answers),
            // The database refused the COMMIT itself: nothing was written.
            Err(e @ sqlx::Error::Database(_)) => return Err(e.into()),
            Err(e) => e,
        };
        self.connection = None;
        // The server process that had the batch: whatever of it is still on
        // its way there (a COMMIT, or the whole statement, held up by the
        // network after this side gave up) must never run after the answer
        // below was given.
        let mut abandoned = self.backend.take();
        tracing::warn!(batch, error = %error, "the answer to a commit was lost; asking the database whether it committed");
        let mut pause = Duration::from_millis(50);
        loop {
            let asked = tokio::time::timeout(CALL_DEADLINE, async {
                if let Some(backend) = abandoned.clone() {
                    backend.end(self.connection().await?).await?;
                    tracing::info!(
                        batch,
                        pid = backend.pid,
                        "the server process of the lost connection has ended"
                    );
                    abandoned = None;
                }
                committed_answers(self.connection().await?, batch).await
            })
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Write(
                    "no answer from PostgreSQL within the deadline".into(),
                ))
            });
            match asked {
                Ok(Some(answers)) => {
                    tracing::info!(batch, "the batch had committed; its answers stand");
                    return Ok(answers);
                }
                Ok(None) => {
                    tracing::info!(batch, "the batch had not committed; writing it again");
                    return Err(StoreError::Query(error));
                }
                Err(e) => {
                    // Whatever failed, this connection is not to be trusted.
                    self.connection = None;
                    tracing::warn!(batch, error = %e, "cannot yet tell whether the batch committed; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    async fn write_alone(&mut self, write: Write) -> Result<Written, StoreError> {
        // The statement path draws ids from the sequences: reserved ones
        // would now be older than those (see `ids`).
        self.ids.clear();
        let mut tries = 0;
        loop {
            let result = async {
                let now = now_ms();
                let hub = self.hub.clone();
                let batch = self.batch_id();
                let mut written = None;
                let attempt = tokio::time::timeout(CALL_DEADLINE, async {
                    let mut tx = self.connection().await?.begin().await?;
                    let done =
                        write_one(&mut PgTx(&mut tx, hub.owner()), write.clone(), now).await?;
                    tell_the_others(&mut tx, &hub, std::slice::from_ref(&done)).await?;
                    written = Some(done);
                    mark(&mut tx, &batch, now).await?;
                    Ok::<_, StoreError>(tx.commit().await.map(|()| None))
                })
                .await;
                let committed = self.settle(attempt)?;
                self.resolve(committed, &batch).await?;
                written.ok_or_else(|| StoreError::Write("the write produced no answer".into()))
            }
            .await;
            match result {
                Err(e) if tries < RETRIES && lost_a_race(&e) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(5 << tries)).await;
                }
                Err(e) => {
                    self.check(&e);
                    if self.connection.is_none() && tries < RETRIES {
                        tries += 1;
                        continue;
                    }
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }
}

/// What a commit came to: the statement's answers (see
/// [`super::statement`]), or the error that may hide a commit.
type Committed = Result<Option<String>, sqlx::Error>;

/// A batch's transaction or statement: its commit's outcome, unless it
/// failed before it could commit.
type Outcome = Result<Committed, StoreError>;

/// What [`write_all`] came to.
enum Sent {
    /// The batch was sent: the outcome of the statement that was the
    /// commit, outside a transaction (inside one, a failed statement is an
    /// error, and this holds the statement's answers).
    Written(Committed),
    /// Outside a transaction, a write needs the statement path: nothing
    /// was sent.
    NeedsTransaction,
}

/// A batch's answers as far as they were known before its statement ran;
/// the runs' come from the statement's answers.
struct Pending {
    answers: Vec<Option<Written>>,
    runs: Option<(Vec<usize>, RunParts)>,
}

impl Pending {
    fn complete(mut self, answers: Option<&str>) -> Result<Vec<Written>, StoreError> {
        if let Some((at, parts)) = self.runs.take() {
            for (at, answer) in at.into_iter().zip(parts.answers(answers)?) {
                self.answers[at] = Some(Written::Run(answer));
            }
        }
        all_answered(self.answers)
    }
}

/// A batch as [`write_all`] writes it.
struct Batch<'a> {
    hub: &'a SharedHub,
    writes: &'a [Write],
    /// Which writes go under their fence ([`fenced`]).
    fenced: &'a [bool],
    now: i64,
    /// The batch's id, written in it.
    id: &'a str,
    /// Whether to prune old batch ids too.
    prune: bool,
    /// Whether a held run's start and end may go as one insert.
    wholes: bool,
}

/// A batch's writes, in one statement ([`super::statement`]): the
/// agent runs' in their set form ([`super::runs`]), the durable
/// engine's planned in memory ([`super::batch`]), with the
/// batch's mark and `NOTIFY`s. A write with no set form (a tool round's
/// messages) or one that needs the statement path goes statement by
/// statement before it, which only a transaction allows: outside one
/// (`in_tx` false) such a batch comes back unwritten.
async fn write_all(
    tx: &mut PgConnection,
    ids: &mut IdPool,
    batch: Batch<'_>,
    in_tx: bool,
    pending: &mut Option<Pending>,
) -> Result<Sent, StoreError> {
    let Batch {
        hub,
        writes,
        fenced,
        now,
        id,
        prune,
        wholes,
    } = batch;
    let me = hub.owner();
    let mut answers: Vec<Option<Written>> = (0..writes.len()).map(|_| None).collect();
    let mut statement = Statement::new(now, me)?;
    let mut durable = Vec::new();
    let mut runs = Vec::new();
    for (at, write) in writes.iter().enumerate() {
        match write {
            Write::Run(run) => runs.push((at, run)),
            _ => durable.push(at),
        }
    }
    let run_writes: Vec<&RunWrite> = runs.iter().map(|(_, run)| *run).collect();
    let mut run_parts = None;
    if set_based(&run_writes, wholes) {
        if !run_writes.is_empty() {
            let parts = add_runs(&mut statement, hub, &run_writes)?;
            run_parts = Some((runs.iter().map(|(at, _)| *at).collect(), parts));
        }
    } else if !in_tx {
        return Ok(Sent::NeedsTransaction);
    } else {
        for (at, run) in runs {
            let write = Write::Run(run.clone());
            answers[at] = Some(write_one(&mut PgTx(&mut *tx, me), write, now).await?);
        }
    }
    if prune {
        prune_marks(tx, now).await?;
    }
    let durable_writes: Vec<Write> = durable.iter().map(|at| writes[*at].clone()).collect();
    let durable_fenced: Vec<bool> = durable.iter().map(|at| fenced[*at]).collect();
    let planned = match durable_writes.is_empty() {
        true => Some((Vec::new(), Rows::default())),
        false => plan(tx, me, &durable_writes, &durable_fenced, now, ids).await?,
    };
    match planned {
        Some((written, rows)) => {
            for (at, written) in durable.into_iter().zip(written) {
                answers[at] = Some(written);
            }
            add_rows(&mut statement, rows)?;
        }
        None => {
            ids.clear();
            if !in_tx {
                return Ok(Sent::NeedsTransaction);
            }
            for (at, write) in durable.into_iter().zip(durable_writes) {
                answers[at] = Some(write_one(&mut PgTx(&mut *tx, me), write, now).await?);
            }
        }
    }
    let known: Vec<&Written> = answers.iter().flatten().collect();
    let tail = Tail {
        batch: id,
        channel: &hub.channel,
        payloads: payloads(hub, known),
    };
    // Known before the statement leaves: if its answer never comes (the
    // deadline drops this future mid-send) and the batch turns out to have
    // committed, these are its answers. Without them the caller could only
    // write the batch again, a second time.
    *pending = Some(Pending {
        answers,
        runs: run_parts,
    });
    Ok(Sent::Written(send(tx, statement, tail).await?))
}

fn all_answered(results: Vec<Option<Written>>) -> Result<Vec<Written>, StoreError> {
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| StoreError::Write("a write of the batch got no answer".into())))
        .collect()
}

/// Names, on the hub's channel, every instance these writes gave something
/// new (an inbox row, a new execution, a management operation) that may be
/// another host's, so that its owner runs it and any host holding a hot
/// image of it drops the image; wakes the workers for runs queued here, and
/// whoever waits for a run that ended. Delivered when the transaction
/// commits.
async fn tell_the_others(
    tx: &mut PgConnection,
    hub: &SharedHub,
    results: &[Written],
) -> Result<(), StoreError> {
    for payload in payloads(hub, results) {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&hub.channel)
            .bind(payload)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The `NOTIFY` payloads of a batch's writes (see [`tell_the_others`]),
/// one of each.
fn payloads<'a>(hub: &SharedHub, results: impl IntoIterator<Item = &'a Written>) -> Vec<String> {
    let results: Vec<&Written> = results.into_iter().collect();
    // An event raised is an inbox row and nothing else: a hot image of its
    // instance stays right but for its inbox. Anything else may change the
    // instance itself.
    let (raised, other): (Vec<&Written>, Vec<&Written>) = results
        .iter()
        .copied()
        .partition(|written| matches!(written, Written::Raise(..)));
    let news = |written: Vec<&'a Written>| -> BTreeSet<&'a str> {
        written
            .into_iter()
            .filter_map(Written::applied)
            .flat_map(|applied| applied.news.iter().map(String::as_str))
            .collect()
    };
    let ids = news(other);
    let posted: Vec<&str> = news(raised).difference(&ids).copied().collect();
    let mut payloads = Vec::new();
    if !ids.is_empty() {
        let ids: Vec<&str> = ids.into_iter().collect();
        payloads.extend(hub.instance_payloads(&ids));
    }
    if !posted.is_empty() {
        payloads.extend(hub.posted_payloads(&posted));
    }
    // Something due later for an instance another host may run (an event
    // or operation unseen until then): that host's scheduler may sleep
    // past it, so all are told when.
    let due = results
        .iter()
        .filter_map(|written| written.applied())
        .filter(|applied| !applied.news.is_empty())
        .filter_map(|applied| applied.due)
        .min();
    payloads.extend(due.map(|at| hub.due_payload(at)));
    for written in results {
        match written {
            // Queued for a session this host does not run: its owner, or
            // any worker, takes it.
            Written::Run(RunWritten::Started {
                run_here: false, ..
            }) => payloads.push(hub.sessions_payload()),
            // Whoever waits for the run hears of its end.
            Written::Run(RunWritten::Ended {
                correlation_id,
                changed: true,
            }) => payloads.push(hub.run_finished_payload(correlation_id)),
            _ => {}
        }
    }
    payloads.sort();
    payloads.dedup();
    payloads
}

/// A statement refused because what a fenced write assumed did not hold:
/// an episode's instance moved on, or the id of a child it starts was
/// taken. Nothing was written; the batch is decided again on what is stored.
fn moved_on(error: &StoreError) -> bool {
    match error {
        StoreError::Query(sqlx::Error::Database(e)) => {
            matches!(e.code().as_deref(), Some(FENCE_REFUSED) | Some("23505"))
        }
        _ => false,
    }
}

/// A deadlock or serialization failure against another host's transaction:
/// the same write succeeds when tried again.
fn lost_a_race(error: &StoreError) -> bool {
    match error {
        StoreError::Query(sqlx::Error::Database(e)) => {
            matches!(e.code().as_deref(), Some("40001") | Some("40P01"))
        }
        _ => false,
    }
}
