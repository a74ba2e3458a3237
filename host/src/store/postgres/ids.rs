//! Ids the PostgreSQL writer hands out without a round trip: inbox rows and
//! executions come from their tables' sequences, reserved a block at a time
//! and kept between batches, so that a batch's statement can carry the ids
//! of the rows it inserts (and the hot instances learn them) without asking
//! the server first.
//!
//! Inbox ids name rows; they do not order an inbox (its `arrival` column,
//! drawn as each row is inserted, does: between hosts blocks reserved ahead
//! never gave an order of commits). Within this host they still follow the
//! order it wrote them in: ids are taken in ascending order from one block
//! after another, ids the statement path draws from the sequence itself are
//! newer than any block, so the writer drops what it holds whenever a batch
//! went that way ([`IdPool::clear`]), and its next block is newer again.

use std::collections::VecDeque;

use sqlx::PgConnection;

use crate::store::error::StoreError;

/// The serial-id tables whose ids the writer reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sequence {
    Inbox,
    Executions,
}

impl Sequence {
    fn table(self) -> &'static str {
        match self {
            Sequence::Inbox => "inbox",
            Sequence::Executions => "executions",
        }
    }
}

/// How many ids one reservation takes at least.
const BLOCK: usize = 256;

/// The writer's reserved ids, ascending.
#[derive(Default)]
pub(super) struct IdPool {
    inbox: VecDeque<i64>,
    executions: VecDeque<i64>,
}

impl IdPool {
    fn ids(&mut self, sequence: Sequence) -> &mut VecDeque<i64> {
        match sequence {
            Sequence::Inbox => &mut self.inbox,
            Sequence::Executions => &mut self.executions,
        }
    }

    /// The next id of `sequence`, reserving a block of at least `hint` ids
    /// first when none is left.
    pub async fn next(
        &mut self,
        connection: &mut PgConnection,
        sequence: Sequence,
        hint: usize,
    ) -> Result<i64, StoreError> {
        if let Some(id) = self.ids(sequence).pop_front() {
            return Ok(id);
        }
        self.reserve(connection, sequence, hint).await?;
        self.ids(sequence).pop_front().ok_or_else(|| {
            StoreError::Write(format!("the {} sequence gave no id", sequence.table()))
        })
    }

    /// Reserves a block of at least `hint` ids of `sequence`.
    pub async fn reserve(
        &mut self,
        connection: &mut PgConnection,
        sequence: Sequence,
        hint: usize,
    ) -> Result<(), StoreError> {
        let count = i64::try_from(hint.max(BLOCK)).unwrap_or(i64::MAX);
        let mut ids: Vec<i64> = sqlx::query_scalar(
            "SELECT nextval(pg_get_serial_sequence($1, 'id')) FROM generate_series(1, $2)",
        )
        .bind(sequence.table())
        .bind(count)
        .fetch_all(&mut *connection)
        .await?;
        ids.sort_unstable();
        self.ids(sequence).extend(ids);
        Ok(())
    }

    /// Forgets every reserved id: the sequence handed out newer ones meanwhile.
    pub fn clear(&mut self) {
        self.inbox.clear();
        self.executions.clear();
    }
}
