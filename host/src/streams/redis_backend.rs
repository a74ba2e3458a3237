//! Streams in Redis: key `agent:response:{correlation_id}`, one `XADD` an
//! entry with fields `chunk` and `timestamp` (ISO-8601), a last entry with
//! `status` = `complete`, or `failed` and `error`; `EXPIRE` on the key
//! after each write. A consumer that knows only Redis rebuilds the answer
//! with `XREAD` from `0`. The connection manager reconnects by itself after
//! Redis comes back.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::streams::StreamRangeReply;
use redis::AsyncCommands;

use super::{Entry, EntryId, Outgoing, Stored, StreamBackend, StreamError};

/// The key of a run's stream.
pub fn key(correlation_id: &str) -> String {
    format!("agent:response:{correlation_id}")
}

/// How long connecting may take at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) struct RedisBackend {
    connection: ConnectionManager,
}

/// `host:port` without a scheme is taken as `redis://host:port`.
fn url_of(address: &str) -> String {
    if address.contains("://") {
        address.to_string()
    } else {
        format!("redis://{address}")
    }
}

/// The address without a password, for logs and errors.
pub(super) fn redacted(address: &str) -> String {
    crate::taskhub::redacted(&url_of(address))
}

impl RedisBackend {
    pub async fn connect(address: &str) -> Result<Self, StreamError> {
        let unreachable = |reason: String| StreamError::RedisUnreachable {
            address: redacted(address),
            reason,
        };
        let info = redis::IntoConnectionInfo::into_connection_info(url_of(address))
            .map_err(|e| unreachable(e.to_string()))?;
        // Without TCP_NODELAY a pipeline waits for the delayed ACK of the
        // one before (40 ms a chunk on Linux).
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let client = redis::Client::open(info.set_tcp_settings(tcp))
            .map_err(|e| unreachable(e.to_string()))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(1);
        let connect = ConnectionManager::new_with_config(client, config);
        let mut connection = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| unreachable("timed out".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        Ok(Self { connection })
    }
}

fn timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn text_of(map: &std::collections::HashMap<String, redis::Value>, field: &str) -> Option<String> {
    map.get(field)
        .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
}

impl StreamBackend for RedisBackend {
    fn append(
        &self,
        entries: &[Outgoing],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<EntryId>, StreamError>> + Send {
        let mut pipe = redis::pipe();
        let now = timestamp();
        let mut keys = BTreeSet::new();
        for outgoing in entries {
            let key = key(&outgoing.correlation_id);
            let attempt = outgoing.attempt.to_string();
            let mut fields: Vec<(&str, &str)> = match &outgoing.entry {
                Entry::Chunk(text) => vec![("chunk", text), ("timestamp", &now)],
                Entry::Complete => vec![("status", "complete"), ("timestamp", &now)],
                Entry::Failed(error) => {
                    vec![("status", "failed"), ("error", error), ("timestamp", &now)]
                }
                // Made by readers, never written.
                Entry::Restart => continue,
            };
            fields.push(("attempt", &attempt));
            pipe.xadd(&key, "*", &fields);
            keys.insert(key);
        }
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        for key in keys {
            pipe.expire(key, seconds).ignore();
        }
        let mut connection = self.connection.clone();
        async move {
            let ids: Vec<String> = pipe.query_async(&mut connection).await?;
            Ok(ids.into_iter().map(EntryId).collect())
        }
    }

    async fn read_after(
        &self,
        correlation_id: &str,
        after: &EntryId,
        limit: usize,
    ) -> Result<Vec<Stored>, StreamError> {
        let mut connection = self.connection.clone();
        // `(` makes the start exclusive (Redis 6.2+).
        let start = if *after == EntryId::start() {
            "-".to_string()
        } else {
            format!("({}", after.as_str())
        };
        let reply: StreamRangeReply = connection
            .xrange_count(key(correlation_id), start, "+", limit)
            .await?;
        reply
            .ids
            .into_iter()
            .map(|found| {
                let entry = if let Some(text) = text_of(&found.map, "chunk") {
                    Entry::Chunk(text)
                } else {
                    match text_of(&found.map, "status").as_deref() {
                        Some("complete") => Entry::Complete,
                        Some("failed") => {
                            Entry::Failed(text_of(&found.map, "error").unwrap_or_default())
                        }
                        _ => {
                            return Err(StreamError::Corrupt(format!(
                                "entry {} of {} has neither chunk nor status",
                                found.id,
                                key(correlation_id)
                            )))
                        }
                    }
                };
                let attempt = text_of(&found.map, "attempt")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                let id = EntryId(found.id);
                let at_ms = i64::try_from(id.key().0).unwrap_or(0);
                Ok(Stored {
                    id,
                    entry,
                    at_ms,
                    attempt,
                })
            })
            .collect()
    }

    async fn sweep(&self) -> Result<u64, StreamError> {
        Ok(0)
    }
}
