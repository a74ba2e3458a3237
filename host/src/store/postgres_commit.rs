//! The PostgreSQL writer: a task with its own connection to the hub, taking
//! the same queue as the SQLite writer. Several hosts may write to one hub
//! at once; each write locks the rows of the instance it decides on, so
//! their decisions are serialized per instance by PostgreSQL itself.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::sync::mpsc;

use super::group_commit::{Job, Shared, Taken};
use super::postgres_tx::PgTx;
use super::writes::{read_one, write_one, Read, ReadOut, Write, Written};
use super::{now_ms, StoreError};

/// How often a write that lost a deadlock or a serialization race to
/// another host is tried again, alone, before it fails.
const RETRIES: usize = 5;

/// How long a starting host waits for the hub's writer lock: a host killed
/// just before holds it until PostgreSQL notices its connection is gone.
const HUB_LOCK_WAIT: Duration = Duration::from_secs(15);

pub(super) async fn start(
    options: PgConnectOptions,
    hub: String,
    queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) -> Result<(), StoreError> {
    let mut connection = PgConnection::connect_with(&options).await?;
    let deadline = tokio::time::Instant::now() + HUB_LOCK_WAIT;
    while !lock_hub(&mut connection, &hub).await? {
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::HubBusy(hub));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::spawn(write_loop(options, hub, connection, queue, shared));
    Ok(())
}

/// One host writes to a hub at a time, until hosts share hubs through
/// leases: the writer's connection holds a session advisory lock on the
/// hub's name, released by PostgreSQL when the connection ends, however
/// the host ends.
async fn lock_hub(connection: &mut PgConnection, hub: &str) -> Result<bool, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext('agenthost taskhub ' || $1))")
            .bind(hub)
            .fetch_one(&mut *connection)
            .await?,
    )
}

async fn write_loop(
    options: PgConnectOptions,
    hub: String,
    connection: PgConnection,
    mut queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) {
    let mut writer = Writer {
        options,
        hub,
        connection: Some(connection),
    };
    while let Some(job) = queue.recv().await {
        let taken = Taken::from(job, &mut queue);
        if !taken.writes.is_empty() {
            let (writes, replies): (Vec<_>, Vec<_>) = taken.writes.into_iter().unzip();
            let results = writer.write_batch(writes).await;
            shared.answer(replies, results);
        }
        for (read, reply) in taken.reads {
            let _ = reply.send(writer.read(read).await);
        }
        if let Some(reply) = taken.close {
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
    hub: String,
    /// Dropped when it fails other than by a statement's own error, and
    /// opened again for the next batch.
    connection: Option<PgConnection>,
}

impl Writer {
    async fn connection(&mut self) -> Result<&mut PgConnection, StoreError> {
        if self.connection.is_none() {
            let mut connection = PgConnection::connect_with(&self.options).await?;
            // Another host may have taken the hub while this one was cut off.
            if !lock_hub(&mut connection, &self.hub).await? {
                return Err(StoreError::HubBusy(self.hub.clone()));
            }
            tracing::info!("the store's writer reconnected to PostgreSQL");
            self.connection = Some(connection);
        }
        self.connection
            .as_mut()
            .ok_or_else(|| StoreError::Write("no connection".into()))
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
        let result = async {
            let mut tx = self.connection().await?.begin().await?;
            let out = read_one(&mut PgTx(&mut tx), read).await?;
            tx.commit().await?;
            Ok(out)
        }
        .await;
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

    async fn try_batch(
        &mut self,
        writes: &[Write],
    ) -> Result<Vec<Result<Written, StoreError>>, StoreError> {
        let now = now_ms();
        let mut tx = self.connection().await?.begin().await?;
        let mut results = Vec::with_capacity(writes.len());
        for write in writes {
            results.push(Ok(write_one(&mut PgTx(&mut tx), write.clone(), now).await?));
        }
        tx.commit().await?;
        Ok(results)
    }

    async fn write_alone(&mut self, write: Write) -> Result<Written, StoreError> {
        let mut tries = 0;
        loop {
            let result = async {
                let now = now_ms();
                let mut tx = self.connection().await?.begin().await?;
                let written = write_one(&mut PgTx(&mut tx), write.clone(), now).await?;
                tx.commit().await?;
                Ok(written)
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
