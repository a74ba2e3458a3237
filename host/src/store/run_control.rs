//! What callers do to runs besides starting them: ask one to stop, list an
//! agent's runs a page at a time. Plain SQL both databases run as written;
//! a cancel request is rare, so it takes the pool rather than the run
//! path's writer (as a tool approval does).

use sqlx::Row;

use super::error::StoreError;
use super::open::Store;
use super::records::{run_from_row, RunRecord, RunStatus, CANCELED, RUN_COLUMNS};

/// Which runs of an agent a page lists.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub session_id: Option<String>,
    /// `AwaitingApproval` selects unfinished runs with undecided tool
    /// calls; `Pending` the other unfinished ones.
    pub status: Option<RunStatus>,
    /// The position (`seq`) of the last run of the previous page: the page
    /// starts with the next older run.
    pub before: Option<i64>,
    pub limit: usize,
    /// Only the runs this caller (an invoke key's id) started.
    pub caller: Option<String>,
}

impl Store {
    /// Asks the run to stop; `None` when there is no such run. The request
    /// is kept with the run (a second request keeps the first one's time),
    /// so that whoever executes it next, after any restart, ends it as
    /// canceled; a run that has ended is left as it is. Returns the run as
    /// stored after the request.
    pub async fn request_cancel(
        &self,
        correlation_id: &str,
        at: i64,
    ) -> Result<Option<RunRecord>, StoreError> {
        sqlx::query(
            "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, $2) \
             WHERE correlation_id = $1 AND status IN ('pending', 'running')",
        )
        .bind(correlation_id)
        .bind(at)
        .execute(self.pool())
        .await?;
        self.run(correlation_id).await
    }

    /// A page of `agent`'s runs, newest first, each with its position (to
    /// ask for the next page from).
    pub async fn list_runs(
        &self,
        agent: &str,
        filter: &RunFilter,
    ) -> Result<Vec<(i64, RunRecord)>, StoreError> {
        let undecided =
            "EXISTS (SELECT 1 FROM approvals a WHERE a.correlation_id = runs.correlation_id \
                         AND a.decision IS NULL)";
        let status = match filter.status {
            None => String::new(),
            Some(RunStatus::Pending | RunStatus::Running) => {
                format!(" AND status IN ('pending', 'running') AND NOT {undecided}")
            }
            Some(RunStatus::AwaitingApproval) => {
                format!(" AND status IN ('pending', 'running') AND {undecided}")
            }
            Some(RunStatus::Completed) => " AND status = 'completed'".into(),
            Some(RunStatus::Failed) => {
                format!(
                    " AND status = 'failed' AND (error_code IS NULL OR error_code <> '{CANCELED}')"
                )
            }
            Some(RunStatus::Canceled) => {
                format!(" AND status = 'failed' AND error_code = '{CANCELED}'")
            }
        };
        let sql = format!(
            "SELECT seq, {RUN_COLUMNS} FROM runs WHERE agent = $1 \
             AND ($2 IS NULL OR session_id = $2) AND ($3 IS NULL OR seq < $3) \
             AND ($5 IS NULL OR caller = $5){status} \
             ORDER BY seq DESC LIMIT $4"
        );
        let rows = sqlx::query(&sql)
            .bind(agent)
            .bind(filter.session_id.as_deref())
            .bind(filter.before)
            .bind(i64::try_from(filter.limit).unwrap_or(i64::MAX))
            .bind(filter.caller.as_deref())
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get::<i64, _>("seq")?, run_from_row(row)?)))
            .collect()
    }
}
