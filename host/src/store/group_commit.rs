//! Group commit: one writer task takes every episode commit waiting at the
//! moment and writes them in a single transaction, each in its own savepoint.
//!
//! SQLite has one writer at a time, and each statement costs a round trip to
//! the connection's thread; a transaction per episode makes concurrent
//! instances queue for the write lock one BEGIN/COMMIT at a time. Batching
//! shares those between all instances ready together, and a failing episode
//! rolls back to its savepoint without taking the others down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::episodes::{apply_episode, Committed, EpisodeCommit};
use super::StoreError;

/// Episodes written in one transaction at most.
const MAX_BATCH: usize = 128;

type Job = (
    EpisodeCommit,
    oneshot::Sender<Result<Committed, StoreError>>,
);

#[derive(Clone)]
pub struct Committer {
    jobs: mpsc::UnboundedSender<Job>,
    stats: Arc<Stats>,
}

/// How many episodes were committed, in how many transactions.
#[derive(Default)]
pub struct Stats {
    pub episodes: AtomicU64,
    pub transactions: AtomicU64,
}

impl Committer {
    /// Starts the writer task on the current tokio runtime.
    pub fn start(pool: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        tokio::spawn(write(pool, queue, stats.clone()));
        Self { jobs, stats }
    }

    pub async fn commit(&self, commit: EpisodeCommit) -> Result<Committed, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((commit, reply))
            .map_err(|_| StoreError::Write("the store is closed".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Write("the store's writer stopped".into()))?
    }

    /// (episodes committed, transactions used).
    pub fn stats(&self) -> (u64, u64) {
        (
            self.stats.episodes.load(Ordering::Relaxed),
            self.stats.transactions.load(Ordering::Relaxed),
        )
    }
}

async fn write(pool: SqlitePool, mut queue: mpsc::UnboundedReceiver<Job>, stats: Arc<Stats>) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (commits, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let count = commits.len() as u64;
        let results = write_batch(&pool, commits).await;
        stats.episodes.fetch_add(count, Ordering::Relaxed);
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

async fn write_batch(
    pool: &SqlitePool,
    commits: Vec<EpisodeCommit>,
) -> Vec<Result<Committed, StoreError>> {
    {
        let count = commits.len();
        let mut tx = match pool.begin_with("BEGIN IMMEDIATE").await {
            Ok(tx) => tx,
            Err(e) => return all_failed(count, &e),
        };
        let mut results = Vec::with_capacity(commits.len());
        for commit in &commits {
            if let Err(e) = sqlx::query("SAVEPOINT episode").execute(&mut *tx).await {
                return all_failed(count, &e);
            }
            let result = apply_episode(&mut tx, commit).await;
            if result.is_err() {
                if let Err(e) = sqlx::query("ROLLBACK TO episode").execute(&mut *tx).await {
                    return all_failed(count, &e);
                }
            }
            if let Err(e) = sqlx::query("RELEASE episode").execute(&mut *tx).await {
                return all_failed(count, &e);
            }
            results.push(result);
        }
        match tx.commit().await {
            Ok(()) => results,
            Err(e) => all_failed(count, &e),
        }
    }
}

/// Every episode of a batch failed with the same store error.
fn all_failed(count: usize, error: &sqlx::Error) -> Vec<Result<Committed, StoreError>> {
    (0..count)
        .map(|_| Err(StoreError::Write(error.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::store::{EpisodeCommit, NewInstance, RuntimeStatus, Store};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_episode_commits_share_transactions_and_all_apply() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .unwrap();
        let ids: Vec<String> = (0..200).map(|i| format!("i{i}")).collect();
        for id in &ids {
            let new = NewInstance {
                id,
                name: "o",
                input: "null",
                component_digest: "d",
                parent: None,
            };
            assert!(store.create_instance(&new).await.unwrap());
        }
        let commits = ids.iter().map(|id| {
            let store = store.clone();
            let commit = EpisodeCommit {
                instance_id: id.clone(),
                orchestration: "o".into(),
                consumed: Vec::new(),
                entries: Vec::new(),
                first_task: 0,
                status: RuntimeStatus::Completed,
                output: Some(format!("\"{id}\"")),
                custom_status: None,
                restart_with: None,
                component_digest: "d".into(),
                child_digests: Default::default(),
                continue_on: None,
            };
            tokio::spawn(async move { store.commit_episode(commit).await })
        });
        let handles: Vec<_> = commits.collect();
        for handle in handles {
            assert!(handle.await.unwrap().unwrap().applied);
        }
        for id in &ids {
            let instance = store.instance(id).await.unwrap().unwrap();
            assert_eq!(instance.status, RuntimeStatus::Completed);
            assert_eq!(
                instance.output.as_deref(),
                Some(format!("\"{id}\"").as_str())
            );
        }
        let (episodes, transactions) = store.committer().stats();
        assert_eq!(episodes, 200);
        assert!(
            transactions < 200,
            "200 concurrent commits used {transactions} transactions"
        );
    }

    #[tokio::test]
    async fn an_episode_for_a_finished_instance_is_not_applied_and_spoils_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display()))
            .await
            .unwrap();
        let new = NewInstance {
            id: "x",
            name: "o",
            input: "null",
            component_digest: "d",
            parent: None,
        };
        store.create_instance(&new).await.unwrap();
        store.terminate("x", "stop").await.unwrap();
        let commit = EpisodeCommit {
            instance_id: "x".into(),
            orchestration: "o".into(),
            consumed: Vec::new(),
            entries: Vec::new(),
            first_task: 0,
            status: RuntimeStatus::Completed,
            output: Some("1".into()),
            custom_status: None,
            restart_with: None,
            component_digest: "d".into(),
            child_digests: Default::default(),
            continue_on: None,
        };
        assert!(!store.commit_episode(commit).await.unwrap().applied);
        assert_eq!(
            store.instance("x").await.unwrap().unwrap().status,
            RuntimeStatus::Terminated
        );
    }
}
