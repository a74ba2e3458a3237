//! The store's clock.

/// Milliseconds since the Unix epoch, the store's clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
