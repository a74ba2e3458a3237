//! Limits that keep one instance (or one caller) from hurting the host. Each
//! check returns a typed error that says which limit, by how much, and what to
//! do instead.

use super::instance::Size;
use super::retry::RetryLimits;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most journal rows of one execution.
    pub max_history_events: u64,
    /// Most journal bytes of one execution.
    pub max_history_bytes: u64,
    /// Most calls (activities, timers, agent calls, sub-orchestrations…)
    /// one episode may make: they are journaled and scheduled in one
    /// commit, and a commit of 15,000 held every other instance's writes
    /// behind it for seconds.
    pub max_episode_calls: u64,
    /// Most events waiting in one instance's inbox.
    pub max_inbox_events: u64,
    /// Most bytes waiting in one instance's inbox.
    pub max_inbox_bytes: u64,
    /// Largest payload handed to the engine (inputs, outputs, events, custom
    /// status, activity and agent inputs).
    pub max_payload_bytes: usize,
    pub retry: RetryLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_history_events: 50_000,
            max_history_bytes: 50 << 20,
            max_episode_calls: 5_000,
            max_inbox_events: 10_000,
            max_inbox_bytes: 16 << 20,
            max_payload_bytes: 1 << 20,
            retry: RetryLimits::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("the {what} is {size} bytes, over the limit of {limit} bytes: store large data elsewhere (a blob store, a database) and pass a reference such as its URL or key")]
    Payload {
        what: String,
        size: usize,
        limit: usize,
    },
    #[error("the instance's history would hold {events} events and {bytes} bytes, over the limit of {max_events} events or {max_bytes} bytes: split the work with continue-as-new or sub-orchestrations")]
    History {
        events: u64,
        bytes: u64,
        max_events: u64,
        max_bytes: u64,
    },
    #[error("one episode made {calls} calls, over the limit of {limit} in one episode (--max-episode-calls): schedule a large fan-out in batches, awaiting each before the next, or spread it over sub-orchestrations")]
    EpisodeCalls { calls: u64, limit: u64 },
    #[error("the instance already has {events} events ({bytes} bytes) waiting in its inbox, the limit is {max_events} events or {max_bytes} bytes: retry after it has consumed some")]
    Inbox {
        events: u64,
        bytes: u64,
        max_events: u64,
        max_bytes: u64,
    },
}

impl Limits {
    pub fn check_payload(&self, what: &str, payload: &str) -> Result<(), LimitError> {
        if payload.len() > self.max_payload_bytes {
            return Err(LimitError::Payload {
                what: what.to_string(),
                size: payload.len(),
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    /// A history that would reach `size` is over the limit.
    pub fn check_history(&self, size: Size) -> Result<(), LimitError> {
        if size.events > self.max_history_events || size.bytes > self.max_history_bytes {
            return Err(LimitError::History {
                events: size.events,
                bytes: size.bytes,
                max_events: self.max_history_events,
                max_bytes: self.max_history_bytes,
            });
        }
        Ok(())
    }

    /// An episode that made `calls` calls is over the limit.
    pub fn check_episode_calls(&self, calls: u64) -> Result<(), LimitError> {
        if calls > self.max_episode_calls {
            return Err(LimitError::EpisodeCalls {
                calls,
                limit: self.max_episode_calls,
            });
        }
        Ok(())
    }

    /// An inbox holding `waiting` cannot take an event of `bytes` more.
    pub fn check_inbox(&self, waiting: Size, bytes: u64) -> Result<(), LimitError> {
        let after = waiting.plus(1, bytes);
        if after.events > self.max_inbox_events || after.bytes > self.max_inbox_bytes {
            return Err(LimitError::Inbox {
                events: waiting.events,
                bytes: waiting.bytes,
                max_events: self.max_inbox_events,
                max_bytes: self.max_inbox_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_names_itself_and_its_numbers() {
        let limits = Limits {
            max_history_events: 10,
            max_history_bytes: 1_000,
            max_inbox_events: 2,
            max_inbox_bytes: 100,
            max_payload_bytes: 5,
            ..Limits::default()
        };
        assert!(limits.check_payload("input", "12345").is_ok());
        let err = limits
            .check_payload("input", "123456")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("input is 6 bytes") && err.contains("limit of 5"),
            "{err}"
        );
        assert!(limits
            .check_history(Size {
                events: 10,
                bytes: 1_000
            })
            .is_ok());
        assert!(limits
            .check_history(Size {
                events: 11,
                bytes: 0
            })
            .is_err());
        assert!(limits
            .check_history(Size {
                events: 0,
                bytes: 1_001
            })
            .is_err());
        assert!(limits
            .check_inbox(
                Size {
                    events: 1,
                    bytes: 10
                },
                10
            )
            .is_ok());
        assert!(limits
            .check_inbox(
                Size {
                    events: 2,
                    bytes: 10
                },
                10
            )
            .is_err());
        assert!(limits
            .check_inbox(
                Size {
                    events: 0,
                    bytes: 95
                },
                10
            )
            .is_err());
    }
}
