//! Opening a PostgreSQL store: the hub's schema, created if missing and
//! migrated, and the pool of plain-query connections into it, each under
//! the session guards. Joining the hub ([`super::shared_hub`]) and starting
//! the writer ([`super::commit`]) come after, on the options this returns.

use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AnyPool, Connection, Executor};

use crate::store::clock::now_ms;
use crate::store::error::StoreError;
use crate::store::hub::TaskHub;
use crate::store::migrations;

/// How long a pooled PostgreSQL connection has to answer a ping before it is
/// dropped rather than reused (or its slot held for ever by a silent one).
const PING_DEADLINE: Duration = Duration::from_secs(2);

/// The pool (of `connections`, each acquired within `deadline`) into task
/// hub `hub` of the database at `url`, its schema created if missing and
/// migrated, and the options of a connection into the hub. While
/// `doubt_until` (ms) has not passed, a connection coming back to the pool
/// is pinged under a deadline before reuse.
pub(in crate::store) async fn open(
    url: &str,
    hub: &TaskHub,
    connections: u32,
    deadline: Duration,
    doubt_until: Arc<AtomicI64>,
) -> Result<(AnyPool, PgConnectOptions), StoreError> {
    let options =
        PgConnectOptions::from_str(url).map_err(|_| StoreError::UnsupportedUrl(url.to_string()))?;
    let address = format!(
        "postgres://{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("")
    );
    let connect_error = |source| StoreError::Connect {
        address: address.clone(),
        source,
    };
    let schema = hub.postgres_schema();
    {
        let mut admin = sqlx::PgConnection::connect_with(&options)
            .await
            .map_err(connect_error)?;
        create_schema(&mut admin, &schema).await?;
        admin.close().await.map_err(connect_error)?;
    }
    let migrating = options.clone().options([("search_path", schema.as_str())]);
    let in_hub = options.clone().options(
        std::iter::once(("search_path", schema.as_str())).chain(SESSION_GUARDS.iter().copied()),
    );
    {
        let migrations = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(migrating)
            .await
            .map_err(connect_error)?;
        migrations::POSTGRES
            .migrator()
            .await?
            .run(&migrations)
            .await?;
        migrations.close().await;
    }
    let session_settings = std::iter::once(format!("SET search_path TO {schema}"))
        .chain(
            SESSION_GUARDS
                .iter()
                .map(|(name, value)| format!("SET {name} = '{value}'")),
        )
        .collect::<Vec<_>>();
    let released_doubt = doubt_until;
    let pool = AnyPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(deadline)
        // sqlx pings a connection when it comes back to the pool; on a silent
        // one that ping would wait for ever and keep the pool's slot. While
        // connections are in doubt (a store call ran past its deadline) a
        // ping under a deadline goes first, and a connection that does not
        // answer is closed instead; otherwise one ping is enough.
        .after_release(move |connection, _| {
            let in_doubt = now_ms() <= released_doubt.load(Ordering::Relaxed);
            Box::pin(async move {
                if !in_doubt {
                    return Ok(true);
                }
                match tokio::time::timeout(PING_DEADLINE, connection.ping()).await {
                    Ok(Ok(())) => Ok(true),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(sqlx::Error::PoolTimedOut),
                }
            })
        })
        .after_connect(move |connection, _| {
            let set_path = session_settings.clone();
            Box::pin(async move {
                for statement in &set_path {
                    connection.execute(statement.as_str()).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
        .map_err(connect_error)?;
    Ok((pool, in_hub))
}

/// Settings of every PostgreSQL session a host opens (migrations aside),
/// so that the server, too, gives up on what a vanished host left: a
/// transaction left open by a client that went silent would otherwise hold
/// its row locks for good and stall every host that needs those rows, and
/// its connection would count against `max_connections` for ever. No
/// statement of the host runs long, and none waits for a lock longer than
/// a store call's deadline; server-side keepalives find a peer that is gone.
const SESSION_GUARDS: [(&str, &str); 6] = [
    ("idle_in_transaction_session_timeout", "10s"),
    ("lock_timeout", "10s"),
    ("statement_timeout", "30s"),
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
];

/// Creates the hub's schema. Two hosts starting at once may both try: the
/// loser's duplicate error is the winner's success.
async fn create_schema(admin: &mut sqlx::PgConnection, schema: &str) -> Result<(), StoreError> {
    match admin
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await
    {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e))
            if matches!(e.code().as_deref(), Some("23505") | Some("42P06")) =>
        {
            Ok(())
        }
        Err(e) => Err(StoreError::Query(e)),
    }
}
