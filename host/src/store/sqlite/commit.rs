//! The SQLite writer. SQLite has one writer at a time; this one owns its own
//! connection on a thread of its own, so a statement costs microseconds
//! (through sqlx each one is a hand-off to the connection's thread and back,
//! which dominated a step).

use std::future::Future;
use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::mpsc;

use super::checkpoint::Checkpoints;
use super::tx::SqliteTx;
use crate::store::clock::now_ms;
use crate::store::commit_queue::{all_failed, Job, Shared, Taken};
use crate::store::durable_records::{Write, Written};
use crate::store::error::StoreError;
use crate::store::writes::{read_one, write_one};

/// Statements kept prepared on the writer's connection (chunked inserts of
/// different sizes are distinct statements).
const PREPARED_STATEMENTS: usize = 64;

pub(in crate::store) fn start(
    path: &Path,
    queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) -> Result<(), StoreError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(super::checkpoint::WRITER_WAIT)?;
    connection.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
    )?;
    connection.set_prepared_statement_cache_capacity(PREPARED_STATEMENTS);
    let checkpoints = Checkpoints::start(path, &connection)?;
    std::thread::Builder::new()
        .name("agenthost-committer".into())
        .spawn(move || write_loop(connection, queue, &shared, checkpoints))
        .map_err(|e| StoreError::Write(format!("cannot start the store's writer: {e}")))?;
    Ok(())
}

fn write_loop(
    mut connection: Connection,
    mut queue: mpsc::UnboundedReceiver<Job>,
    shared: &Shared,
    checkpoints: Checkpoints,
) {
    let _alive = shared.health.guard();
    while let Some(job) = queue.blocking_recv() {
        let taken = Taken::from(job, &mut queue);
        // Reads are answered after the batch commits, so they see it whole.
        if !taken.writes.is_empty() {
            shared.health.batch_started();
            let (writes, replies): (Vec<_>, Vec<_>) = taken.writes.into_iter().unzip();
            let (batch, started) = (writes.len(), std::time::Instant::now());
            let results = write_batch(&mut connection, writes);
            crate::metrics::commit(batch, started.elapsed());
            shared.answer(replies, results);
            checkpoints.wrote(&connection);
        }
        for (read, reply) in taken.reads {
            let _ = reply.send(run_now(read_one(&mut SqliteTx(&connection), read)));
        }
        if let Some(reply) = taken.close {
            shared.health.closed();
            queue.close();
            drop(connection);
            checkpoints.stop();
            let _ = reply.send(());
            return;
        }
    }
}

/// Writes a batch in one transaction. Most batches have no failing write, so
/// they run without savepoints; if one fails, the batch is rolled back and
/// written again with a savepoint per write, so that the failure spoils
/// nothing else. Decisions are made inside the transaction, so writing again
/// decides again, on the same state.
fn write_batch(
    connection: &mut Connection,
    writes: Vec<Write>,
) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results = Vec::with_capacity(count);
    let mut failed = false;
    for write in &writes {
        match run_now(write_one(&mut SqliteTx(&tx), write.clone(), now)) {
            Ok(written) => results.push(Ok(written)),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        return match tx.commit() {
            Ok(()) => results,
            Err(e) => all_failed(count, &e),
        };
    }
    if let Err(e) = tx.rollback() {
        return all_failed(count, &e);
    }
    write_isolated(connection, writes)
}

/// The slow path: each write in its own savepoint.
fn write_isolated(
    connection: &mut Connection,
    writes: Vec<Write>,
) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let mut tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results = Vec::with_capacity(count);
    for write in writes {
        let savepoint = match tx.savepoint() {
            Ok(savepoint) => savepoint,
            Err(e) => return all_failed(count, &e),
        };
        let result = run_now(write_one(&mut SqliteTx(&savepoint), write, now));
        // A savepoint dropped without commit rolls back to where it began.
        let ended = match &result {
            Ok(_) => savepoint.commit(),
            Err(_) => savepoint.finish(),
        };
        if let Err(e) = ended {
            return all_failed(count, &e);
        }
        results.push(result);
    }
    match tx.commit() {
        Ok(()) => results,
        Err(e) => all_failed(count, &e),
    }
}

/// Runs a future that cannot wait: SQLite's statements complete inside the
/// call, so the shared async write code finishes in one poll on the writer
/// thread, with no runtime under it.
fn run_now<T>(future: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    use futures::FutureExt;
    future.now_or_never().unwrap_or_else(|| {
        Err(StoreError::Write(
            "a SQLite write waited on something: it must complete at once".into(),
        ))
    })
}
