//! The one statement a batch is written by on PostgreSQL: a data-modifying
//! `WITH` part per kind of row ([`super::flush`] adds the durable
//! engine's, [`super::runs`] the agent runs'), then the batch's
//! mark, the check that every fenced row held, and the `NOTIFY`s. What the
//! statement decided itself (the runs' answers) comes back in its one row
//! and is kept with the mark, so that a batch whose answer is lost with its
//! connection, and turns out to have committed, still has its answers.
//!
//! The parts see one snapshot, not each other's rows: whoever adds a part
//! makes sure no two parts touch one row in an order that matters.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Arguments, PgConnection, Row};

use crate::store::error::StoreError;

/// A batch's statement as it is built: its parts and their arguments,
/// numbered as they are bound.
pub(super) struct Statement {
    parts: Vec<String>,
    arguments: PgArguments,
    count: usize,
    now: String,
    me: Option<String>,
    me_value: Option<String>,
    /// Fenced rows: how many the statement must find, and the expressions
    /// that count those it found.
    expected: usize,
    held: Vec<String>,
    /// `NOTIFY`s the parts send themselves (their payloads depend on what
    /// the statement finds), as expressions counting them.
    notifies: Vec<String>,
    /// What the parts answer, as `(key, JSON expression)`.
    answers: Vec<(&'static str, String)>,
}

/// What the statement carries besides its parts.
pub(super) struct Tail<'a> {
    /// The batch's id, written with its answers so that an ambiguous commit
    /// can be resolved.
    pub batch: &'a str,
    pub channel: &'a str,
    /// `NOTIFY` payloads known before the statement runs.
    pub payloads: Vec<String>,
}

impl Statement {
    /// `now` is the batch's time; `me` the host that writes (bound only if
    /// a part uses it: a placeholder nothing uses has no type).
    pub fn new(now: i64, me: Option<&str>) -> Result<Self, StoreError> {
        let mut statement = Self {
            parts: Vec::new(),
            arguments: PgArguments::default(),
            count: 0,
            now: String::new(),
            me: None,
            me_value: me.map(str::to_string),
            expected: 0,
            held: Vec::new(),
            notifies: Vec::new(),
            answers: Vec::new(),
        };
        statement.now = statement.bind(now)? + "::BIGINT";
        Ok(statement)
    }

    /// Binds `value`; its placeholder.
    pub fn bind<'q, T>(&mut self, value: T) -> Result<String, StoreError>
    where
        T: 'q + sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.arguments
            .add(value)
            .map_err(|e| StoreError::Write(format!("could not bind a batch's rows: {e}")))?;
        self.count += 1;
        Ok(format!("${}", self.count))
    }

    /// The batch's time, as a `BIGINT`.
    pub fn now(&self) -> &str {
        &self.now
    }

    /// The writing host's id (NULL for a host that runs nothing), as `TEXT`.
    pub fn me(&mut self) -> Result<String, StoreError> {
        if let Some(placeholder) = &self.me {
            return Ok(placeholder.clone());
        }
        let value = self.me_value.clone();
        let placeholder = self.bind(value)? + "::TEXT";
        self.me = Some(placeholder.clone());
        Ok(placeholder)
    }

    pub fn part(&mut self, name: &str, sql: String) {
        self.parts.push(format!("{name} AS ({sql})"));
    }

    /// The statement must find `expected` rows, counted by `held`, or it
    /// is refused whole ([`super::batch::FENCE_REFUSED`]).
    pub fn must_hold(&mut self, expected: usize, held: String) {
        self.expected += expected;
        self.held.push(held);
    }

    /// A `NOTIFY` a part sends, as an expression that counts what it sent.
    pub fn notify(&mut self, sent: String) {
        self.notifies.push(sent);
    }

    /// What a part answers, as a JSON expression.
    pub fn answer(&mut self, key: &'static str, json: String) {
        self.answers.push((key, json));
    }

    /// The whole statement, its mark and its last `SELECT`.
    fn finish(mut self, tail: Tail<'_>) -> Result<(String, PgArguments), StoreError> {
        let answers = match self.answers.is_empty() {
            true => "NULL".to_string(),
            false => {
                let fields: Vec<String> = std::mem::take(&mut self.answers)
                    .into_iter()
                    .map(|(key, json)| format!("'{key}', {json}"))
                    .collect();
                format!("json_build_object({})::TEXT", fields.join(", "))
            }
        };
        let batch = self.bind(tail.batch.to_string())?;
        let now = self.now.clone();
        self.part(
            "marked",
            format!(
                "INSERT INTO commits (id, at, answers) VALUES ({batch}, {now}, {answers}) RETURNING answers"
            ),
        );
        let held = match self.expected {
            0 => "true".to_string(),
            expected => {
                let expected = self.bind(i64::try_from(expected).unwrap_or(i64::MAX))?;
                format!(
                    "fences_held({expected}::BIGINT, {})",
                    std::mem::take(&mut self.held).join(" + ")
                )
            }
        };
        let mut notified = std::mem::take(&mut self.notifies);
        if !tail.payloads.is_empty() {
            let channel = self.bind(tail.channel.to_string())?;
            let payloads = self.bind(tail.payloads)?;
            notified.push(format!(
                "(SELECT COUNT(pg_notify({channel}, p)) FROM UNNEST({payloads}::TEXT[]) AS p)"
            ));
        }
        let notified = match notified.is_empty() {
            true => "0".to_string(),
            false => notified.join(" + "),
        };
        let sql = format!(
            "WITH {} SELECT {held} AS held, {notified} AS notified, (SELECT answers FROM marked) AS answers",
            self.parts.join(", ")
        );
        Ok((sql, self.arguments))
    }
}

/// Sends the statement. The inner result is the statement's own, with the
/// answers its parts gave (outside a transaction it is the commit's: an
/// error there may still have committed, and the caller resolves it).
pub(super) async fn send(
    connection: &mut PgConnection,
    statement: Statement,
    tail: Tail<'_>,
) -> Result<Result<Option<String>, sqlx::Error>, StoreError> {
    let (sql, arguments) = statement.finish(tail)?;
    Ok(sqlx::query_with(&sql, arguments)
        .fetch_one(&mut *connection)
        .await
        .and_then(|row: PgRow| row.try_get::<Option<String>, _>("answers")))
}
