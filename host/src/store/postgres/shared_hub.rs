//! Several hosts on one PostgreSQL task hub.
//!
//! Each process that opens the hub registers a lease row (`hosts`), renewed
//! by a heartbeat; an instance, a session and a task each have at most one
//! owner among them. Whatever a host owns is run by it alone: its hot
//! state lives there, and an episode commits only on an instance its host
//! still owns (the fence in [`crate::store::writes`]). When a host dies its lease
//! expires and the others claim what it owned, with `FOR UPDATE SKIP
//! LOCKED`, from the log. A host that stops cleanly hands everything back
//! at once.
//!
//! Hosts wake each other with `NOTIFY` on the hub's channel (no polling
//! between them): a commit that gives an instance something new names it,
//! a new run wakes the session claimers, a finished run wakes whoever waits
//! for it. A notification is only a wake-up; the store stays the truth, and
//! a periodic pass catches any that is lost.
//!
//! Lease times are read on the database's clock, so hosts whose clocks
//! disagree still agree on who is alive.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::AnyPool;
use sqlx::Connection;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::core::fence::{self, SessionFence};
use crate::store::clock::now_ms;
use crate::store::error::StoreError;
use crate::store::records::{RunRecord, SessionKey};

/// The database's clock, in Unix milliseconds.
pub(super) const DB_NOW: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// How a process takes part in its task hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// HTTP and worker in one process (`agenthost serve`).
    Serve,
    /// HTTP only: starts, raises and runs go to the workers through the
    /// store (`agenthost serve --no-worker`).
    Front,
    /// Runs agents, activities, orchestrations and timers; no HTTP
    /// (`agenthost worker`).
    Worker,
}

impl Role {
    /// Whether the process runs work (episodes, tasks, agent runs).
    pub fn works(self) -> bool {
        !matches!(self, Role::Front)
    }

    fn as_str(self) -> &'static str {
        match self {
            Role::Serve => "serve",
            Role::Front => "front",
            Role::Worker => "worker",
        }
    }
}

/// This process on its hub.
#[derive(Debug, Clone, Copy)]
pub struct Membership {
    pub role: Role,
    /// How long a host's ownership outlives its last heartbeat: the time
    /// after which a killed host's work is taken over.
    pub lease: Duration,
}

impl Default for Membership {
    fn default() -> Self {
        Self {
            role: Role::Serve,
            lease: Duration::from_secs(5),
        }
    }
}

/// What another host's notification asks of this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// These instances got something new (an inbox row, a management
    /// operation): a hot image of them is stale, and their owner has work.
    Instances(Vec<String>),
    /// These instances got inbox rows and nothing else (events raised by
    /// another host): a hot image of them stays right but for its inbox,
    /// which its next episode reads again; their owner has work.
    Posted(Vec<String>),
    /// A run was queued: sessions may need a worker.
    Sessions,
    /// A run was queued for a session this host owns (a front named this
    /// host in the statement that queued it): no claim pass is needed.
    Assigned(Assigned),
    /// This run (correlation id) finished; its record when the
    /// notification could carry it.
    RunFinished(String, Option<Arc<RunRecord>>),
    /// A caller asked this run (correlation id) of this session to stop:
    /// the host executing it stops it; the session's owner wakes its worker
    /// (a run nobody executes ends when its worker reaches it).
    CancelRequested(String, SessionKey),
    /// Notifications may have been lost (the listener reconnected), or a
    /// host handed its work back: look at everything.
    Everything,
    /// Something another host wrote for later comes due at this time (ms,
    /// the writer's clock): an event or operation unseen until then, maybe
    /// for an instance this host runs. Its scheduler looks then.
    Due(i64),
}

/// The longest payload sent; PostgreSQL refuses one of 8000 bytes or more.
pub(in crate::store) const PAYLOAD_MAX: usize = payload::MAX;

/// A run queued for a session another host gave this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    pub correlation_id: String,
    pub agent: String,
    pub session_id: String,
    /// The session began with this run (or had expired): no history.
    pub new_session: bool,
    /// No other run of the session was pending or running when it was
    /// queued: it is the session's next.
    pub next_in_line: bool,
}

/// The notification channel's payloads: `<kind> <sender> [<data>]`.
mod payload {
    use super::{Assigned, SessionKey, Wake};

    /// PostgreSQL's limit is 8000 bytes; ids are packed below it.
    pub const MAX: usize = 7_800;

    pub fn instances(sender: &str, ids: &[&str]) -> Vec<String> {
        packed("i", sender, ids)
    }

    pub fn posted(sender: &str, ids: &[&str]) -> Vec<String> {
        packed("e", sender, ids)
    }

    fn packed(kind: &str, sender: &str, ids: &[&str]) -> Vec<String> {
        let mut payloads = Vec::new();
        let mut current = format!("{kind} {sender}");
        for id in ids {
            if current.len() + id.len() + 1 > MAX {
                payloads.push(std::mem::replace(&mut current, format!("{kind} {sender}")));
            }
            current.push(' ');
            current.push_str(id);
        }
        payloads.push(current);
        payloads
    }

    pub fn sessions(sender: &str) -> String {
        format!("s {sender}")
    }

    pub fn run_finished(sender: &str, correlation_id: &str) -> String {
        format!("d {sender} {correlation_id}")
    }

    pub fn everything(sender: &str) -> String {
        format!("w {sender}")
    }

    pub fn due(sender: &str, at: i64) -> String {
        format!("t {sender} {at}")
    }

    /// A run queued for a session `host` owns: written by the statement
    /// that queues it (`postgres/runs.rs`), as `r <sender> <JSON array>`:
    /// owner, correlation id, agent, session id, new session, busy. Ids may
    /// hold spaces; the JSON keeps them whole.
    pub const ASSIGNED: &str = "r";

    fn assigned(json: &str, me: &str) -> Option<Wake> {
        let value: serde_json::Value = serde_json::from_str(json).ok()?;
        let a = value.as_array()?;
        let text = |i: usize| a.get(i).and_then(|v| v.as_str()).map(str::to_string);
        if text(0)? != me {
            return None;
        }
        Some(Wake::Assigned(Assigned {
            correlation_id: text(1)?,
            agent: text(2)?,
            session_id: text(3)?,
            new_session: a.get(4)?.as_bool()?,
            next_in_line: !a.get(5)?.as_bool()?,
        }))
    }

    /// A run a caller asked to stop: `c <sender> <JSON array>` of its
    /// correlation id, agent and session id.
    pub const CANCEL: &str = "c";

    pub fn cancel(sender: &str, correlation_id: &str, session: &SessionKey) -> String {
        let ids = serde_json::json!([correlation_id, session.agent, session.session_id]);
        format!("{CANCEL} {sender} {ids}")
    }

    fn canceled(json: &str) -> Option<Wake> {
        let value: serde_json::Value = serde_json::from_str(json).ok()?;
        let a = value.as_array()?;
        let text = |i: usize| a.get(i).and_then(|v| v.as_str()).map(str::to_string);
        Some(Wake::CancelRequested(
            text(0)?,
            SessionKey {
                agent: text(1)?,
                session_id: text(2)?,
            },
        ))
    }

    /// A run ended, with its record: written by the statement that ends
    /// it (`postgres/runs.rs`), as `f <sender> <JSON array>` of the run's
    /// columns ([`crate::store::records::run_from_array`]).
    pub const ENDED: &str = "f";

    fn ended(json: &str) -> Option<Wake> {
        let value: serde_json::Value = serde_json::from_str(json).ok()?;
        let record = crate::store::records::run_from_array(value.as_array()?)?;
        Some(Wake::RunFinished(
            record.correlation_id.clone(),
            Some(std::sync::Arc::new(record)),
        ))
    }

    /// `None` for a payload of this host's own, or one it does not know.
    pub fn parse(text: &str, me: &str) -> Option<Wake> {
        let mut whole = text.splitn(3, ' ');
        let kind = whole.next()?;
        if kind == ASSIGNED || kind == ENDED || kind == CANCEL {
            if whole.next()? == me {
                return None;
            }
            let json = whole.next()?;
            return match kind {
                ASSIGNED => assigned(json, me),
                ENDED => ended(json),
                _ => canceled(json),
            };
        }
        let mut parts = text.split(' ');
        let kind = parts.next()?;
        if parts.next()? == me {
            return None;
        }
        match kind {
            "i" => Some(Wake::Instances(parts.map(str::to_string).collect())),
            "e" => Some(Wake::Posted(parts.map(str::to_string).collect())),
            "s" => Some(Wake::Sessions),
            "d" => parts
                .next()
                .map(|id| Wake::RunFinished(id.to_string(), None)),
            "w" => Some(Wake::Everything),
            "t" => parts.next()?.parse().ok().map(Wake::Due),
            _ => None,
        }
    }
}

/// This host's identity on a shared hub, its heartbeat and its listener.
pub(in crate::store) struct SharedHub {
    pub host: String,
    pub role: Role,
    pub channel: String,
    wakes: broadcast::Sender<Wake>,
    stop: CancellationToken,
    /// When this host last renewed its lease, on its own clock (ms).
    renewed_at: Arc<AtomicI64>,
    /// When the current unbroken run of renewals began (ms): fences read
    /// since still hold without a read ([`fence::unbroken`]).
    unbroken_since: Arc<AtomicI64>,
    lease_ms: i64,
}

impl SharedHub {
    /// Registers the host on the hub, then keeps its lease and listens for
    /// the others' notifications until [`Self::leave`].
    pub async fn join(
        pool: &AnyPool,
        listen_options: PgConnectOptions,
        hub: &str,
        membership: Membership,
    ) -> Result<Self, StoreError> {
        let host = uuid::Uuid::new_v4().simple().to_string();
        // The lease runs from no later than this (the INSERT below).
        let joining = now_ms();
        let lease_ms = i64::try_from(membership.lease.as_millis())
            .unwrap_or(i64::MAX)
            .max(100);
        // Rows of hosts long gone only make the live-host checks slower.
        sqlx::query(&format!(
            "DELETE FROM hosts WHERE expires_at < {DB_NOW} - 86400000"
        ))
        .execute(pool)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO hosts (id, role, started_at, expires_at) VALUES ($1, $2, {DB_NOW}, {DB_NOW} + $3)"
        ))
        .bind(&host)
        .bind(membership.role.as_str())
        .bind(lease_ms)
        .execute(pool)
        .await?;
        let (wakes, _) = broadcast::channel(4096);
        let hub = Self {
            host,
            role: membership.role,
            channel: format!("agenthost_{hub}"),
            wakes,
            stop: CancellationToken::new(),
            renewed_at: Arc::new(AtomicI64::new(joining)),
            unbroken_since: Arc::new(AtomicI64::new(joining)),
            lease_ms,
        };
        let listener = hub.listen(listen_options.clone()).await?;
        tokio::spawn(listen_loop(
            listener,
            hub.host.clone(),
            hub.wakes.clone(),
            hub.stop.clone(),
        ));
        tokio::spawn(heartbeat(
            listen_options.clone(),
            hub.host.clone(),
            membership.role,
            lease_ms,
            hub.stop.clone(),
            hub.renewed_at.clone(),
            hub.unbroken_since.clone(),
        ));
        tracing::info!(host = %hub.host, role = membership.role.as_str(), lease = ?membership.lease, "joined the shared task hub");
        Ok(hub)
    }

    /// When this host last renewed its lease (ms, its own clock) and the
    /// lease's length: together, until when no other host can take its
    /// work over.
    pub fn lease(&self) -> (i64, i64) {
        (self.renewed_at.load(Ordering::Relaxed), self.lease_ms)
    }

    /// Whether `held` still holds by this host's unbroken lease alone
    /// ([`fence::unbroken`]), its lease still running now.
    pub fn holds_by_lease(&self, held: &SessionFence) -> bool {
        // Acquire: a renewal seen here brings the break it recorded before.
        let renewed_at = self.renewed_at.load(Ordering::Acquire);
        fence::unbroken(self.unbroken_since.load(Ordering::Acquire), held)
            && now_ms() <= fence::send_by(renewed_at, self.lease_ms)
    }

    /// Whether this host's lease has lapsed (its last renewal is older than
    /// the lease): it then claims nothing new.
    pub fn lease_lapsed(&self) -> bool {
        now_ms() - self.renewed_at.load(Ordering::Relaxed) > self.lease_ms
    }

    async fn listen(&self, options: PgConnectOptions) -> Result<PgListener, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(&self.channel).await?;
        Ok(listener)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.wakes.subscribe()
    }

    /// The owner identity of a host that runs work.
    pub fn owner(&self) -> Option<&str> {
        self.role.works().then_some(self.host.as_str())
    }

    /// Stops the heartbeat and the listener, hands back everything this
    /// host owned and tells the others to take it now.
    pub async fn leave(&self, pool: &AnyPool) {
        self.stop.cancel();
        let released = async {
            let mut tx = pool.begin().await?;
            // A session changing hands bumps its epoch (see core::fence).
            for set in [
                "instances SET owner = NULL",
                "sessions SET owner = NULL, epoch = epoch + 1",
                "tasks SET owner = NULL",
            ] {
                sqlx::query(&format!("UPDATE {set} WHERE owner = $1"))
                    .bind(&self.host)
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("DELETE FROM hosts WHERE id = $1")
                .bind(&self.host)
                .execute(&mut *tx)
                .await?;
            notify(&mut *tx, &self.channel, &payload::everything(&self.host)).await?;
            tx.commit().await?;
            Ok::<_, StoreError>(())
        }
        .await;
        match released {
            Ok(()) => {
                tracing::info!(host = %self.host, "left the shared task hub; its work is handed back")
            }
            Err(e) => {
                tracing::warn!(host = %self.host, error = %e, "could not hand back this host's work; the others take it when its lease expires")
            }
        }
    }

    /// `NOTIFY` payloads naming instances that got something new.
    pub fn instance_payloads(&self, ids: &[&str]) -> Vec<String> {
        payload::instances(&self.host, ids)
    }

    /// `NOTIFY` payloads naming instances that got inbox rows only.
    pub fn posted_payloads(&self, ids: &[&str]) -> Vec<String> {
        payload::posted(&self.host, ids)
    }

    /// The start of a payload telling a host of a run queued for a session
    /// it owns; the statement that queues it adds the rest ([`Assigned`]).
    pub fn assigned_prefix(&self) -> String {
        format!("{} {} ", payload::ASSIGNED, self.host)
    }

    pub fn sessions_payload(&self) -> String {
        payload::sessions(&self.host)
    }

    /// A payload telling the others that something comes due at `at` (ms).
    pub fn due_payload(&self, at: i64) -> String {
        payload::due(&self.host, at)
    }

    /// The start of a payload carrying an ended run's record; the
    /// statement that ends it adds the record.
    pub fn run_ended_prefix(&self) -> String {
        format!("{} {} ", payload::ENDED, self.host)
    }

    pub fn run_finished_payload(&self, correlation_id: &str) -> String {
        payload::run_finished(&self.host, correlation_id)
    }

    /// A payload telling the others that a caller asked a run to stop (it
    /// may not fit: see [`PAYLOAD_MAX`]).
    pub fn cancel_payload(&self, correlation_id: &str, session: &SessionKey) -> String {
        payload::cancel(&self.host, correlation_id, session)
    }

    /// Hosts whose lease has not expired, as a subquery.
    pub fn live_hosts() -> String {
        format!("SELECT id FROM hosts WHERE expires_at > {DB_NOW}")
    }
}

/// `pg_notify` on `channel`; delivered when the transaction commits.
pub(in crate::store) async fn notify<'e, E>(
    executor: E,
    channel: &str,
    payload: &str,
) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(executor)
        .await?;
    Ok(())
}

async fn listen_loop(
    mut listener: PgListener,
    me: String,
    wakes: broadcast::Sender<Wake>,
    stop: CancellationToken,
) {
    loop {
        let received = tokio::select! {
            received = listener.try_recv() => received,
            () = stop.cancelled() => return,
        };
        match received {
            Ok(Some(notification)) => {
                if let Some(wake) = payload::parse(notification.payload(), &me) {
                    let _ = wakes.send(wake);
                }
            }
            // The connection was lost and made again: what was sent
            // meanwhile is gone, so look at everything.
            Ok(None) => {
                tracing::warn!("the task hub's notification connection was re-established");
                let _ = wakes.send(Wake::Everything);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for the other hosts' notifications; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = stop.cancelled() => return,
                }
                let _ = wakes.send(Wake::Everything);
            }
        }
    }
}

/// Renews the lease three times per lease period, on a connection of its
/// own: behind the requests on the shared pool, a renewal could wait past
/// the lease and the others would take a live host's work. Each renewal has
/// a deadline (a third of the lease); a connection that misses it is dropped
/// and another opened. A row found missing (the host was idle past its lease
/// and another deleted it) is put back.
async fn heartbeat(
    options: PgConnectOptions,
    host: String,
    role: Role,
    lease_ms: i64,
    stop: CancellationToken,
    renewed_at: Arc<AtomicI64>,
    unbroken_since: Arc<AtomicI64>,
) {
    let period = Duration::from_millis(u64::try_from(lease_ms / 3).unwrap_or(1_000).max(30));
    let mut ticker = tokio::time::interval(period);
    let mut connection: Option<sqlx::PgConnection> = None;
    let mut lapsed = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        let started = now_ms();
        let renewed = tokio::time::timeout(period, async {
            if connection.is_none() {
                connection = Some(sqlx::PgConnection::connect_with(&options).await?);
            }
            let Some(connection) = connection.as_mut() else {
                return Err(sqlx::Error::PoolClosed);
            };
            sqlx::query(&format!(
                "INSERT INTO hosts (id, role, started_at, expires_at) VALUES ($1, $2, {DB_NOW}, {DB_NOW} + $3) \
                 ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at"
            ))
            .bind(&host)
            .bind(role.as_str())
            .bind(lease_ms)
            .execute(connection)
            .await
        })
        .await
        .unwrap_or_else(|_| Err(sqlx::Error::PoolTimedOut));
        if renewed.is_err() {
            connection = None;
        }
        let age = now_ms() - renewed_at.load(Ordering::Relaxed);
        if renewed.is_err() && age > lease_ms && !lapsed {
            lapsed = true;
            tracing::error!(host = %host, "this host could not renew its lease in time: it takes no new work until it can (its work may be taken over)");
        }
        if renewed.is_ok() && lapsed {
            lapsed = false;
            tracing::info!(host = %host, "lease renewed again; taking work");
        }
        if renewed.is_ok() {
            crate::metrics::lease_renewed();
            // A renewal begun after the last one's lease could have run
            // out: another host may have taken this one's sessions since,
            // and fences read before it must be read again.
            if !fence::continues(renewed_at.load(Ordering::Relaxed), started, lease_ms) {
                unbroken_since.store(started, Ordering::Release);
            }
            // The renewal began at `started`: the lease runs from no later.
            renewed_at.fetch_max(started, Ordering::Release);
        }
        if let Err(e) = renewed {
            tracing::warn!(host = %host, error = %e, "could not renew this host's lease; its work may be taken over");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{payload, SessionKey, Wake};

    #[test]
    fn payloads_round_trip_and_a_hosts_own_are_ignored() {
        let ids: Vec<String> = (0..2_000).map(|i| format!("instance-{i:05}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let payloads = payload::instances("h1", &refs);
        assert!(payloads.len() > 1, "packed under the size limit");
        let mut seen = Vec::new();
        for p in &payloads {
            assert!(p.len() <= payload::MAX);
            assert_eq!(payload::parse(p, "h1"), None, "its own");
            match payload::parse(p, "h2") {
                Some(Wake::Instances(found)) => seen.extend(found),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ids);
        assert_eq!(
            payload::parse(&payload::run_finished("h1", "c1"), "h2"),
            Some(Wake::RunFinished("c1".into(), None))
        );
        assert_eq!(
            payload::parse(&payload::sessions("h1"), "h2"),
            Some(Wake::Sessions)
        );
        assert_eq!(
            payload::parse(&payload::everything("h1"), "h2"),
            Some(Wake::Everything)
        );
        assert_eq!(
            payload::parse(&payload::due("h1", 1_700_000_000_123), "h2"),
            Some(Wake::Due(1_700_000_000_123))
        );
        assert_eq!(payload::parse(&payload::due("h1", 5), "h1"), None);
        assert_eq!(payload::parse("t h1 soon", "h2"), None);
        assert_eq!(payload::parse("garbage", "h2"), None);
        let session = SessionKey {
            agent: "a".into(),
            session_id: "a session with spaces".into(),
        };
        let cancel = payload::cancel("h1", "c 1", &session);
        assert_eq!(payload::parse(&cancel, "h1"), None, "its own");
        assert_eq!(
            payload::parse(&cancel, "h2"),
            Some(Wake::CancelRequested("c 1".into(), session))
        );
        let posted = payload::posted("h1", &["a", "b"]);
        assert_eq!(
            posted
                .iter()
                .map(|p| payload::parse(p, "h2"))
                .collect::<Vec<_>>(),
            vec![Some(Wake::Posted(vec!["a".into(), "b".into()]))]
        );
        // Ids with spaces stay whole; only the host named takes it.
        let assigned = r#"r h1 ["h2","c 1","agent","s 1",true,false]"#;
        assert_eq!(
            payload::parse(assigned, "h2"),
            Some(Wake::Assigned(super::Assigned {
                correlation_id: "c 1".into(),
                agent: "agent".into(),
                session_id: "s 1".into(),
                new_session: true,
                next_in_line: true,
            }))
        );
        assert_eq!(payload::parse(assigned, "h3"), None);
        assert_eq!(payload::parse(assigned, "h1"), None);
        assert_eq!(payload::parse("r h1 not json", "h2"), None);
    }
}
