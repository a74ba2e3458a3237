//! A request body that holds back its last byte until it has checked the
//! request's send-by moment.
//!
//! A model request has an effect no transaction can take back: once the
//! endpoint has it whole, the turn is asked (and paid for). A host checks
//! that it still owns the session just before a turn, but a host paused
//! between that check and the send (SIGSTOP, a long stall) would, on waking,
//! send a turn that the session's new owner has asked meanwhile. So the body
//! is sent in two pieces, and the second, one byte, is produced only if the
//! send-by moment has not passed: a late request is cut short (the
//! connection is closed with the body incomplete) and no HTTP server acts
//! on a request whose body never arrived. What remains is the moment
//! between that check and the write of the last byte to the socket, inside
//! one poll of the connection.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use futures::stream::{self, StreamExt};

/// Why a gated body stopped short: the moment had passed by this much.
#[derive(Debug, thiserror::Error)]
#[error("the request's send-by moment passed {0} ms ago")]
pub(super) struct Late(pub(super) i64);

/// Milliseconds since the Unix epoch: the clock the lease is kept on.
pub(super) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How late a gated body was when it stopped short (0: it was not).
#[derive(Clone, Default)]
pub(super) struct Lateness(Arc<AtomicI64>);

impl Lateness {
    pub(super) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// `bytes` as a body whose last byte is produced only before `send_by`
/// (ms since the Unix epoch); `lateness` records by how much it missed.
/// The caller sets `Content-Length`, so the request is framed by length
/// (not chunked) and incomplete without that byte.
pub(super) fn gated(mut bytes: Vec<u8>, send_by: i64, lateness: Lateness) -> reqwest::Body {
    let last = bytes.split_off(bytes.len().saturating_sub(1));
    let head = stream::once(async move { Ok::<Vec<u8>, Late>(bytes) });
    let tail = stream::once(async move {
        let late = now_ms() - send_by;
        if late > 0 {
            lateness.0.store(late, Ordering::Relaxed);
            tracing::warn!(
                late_ms = late,
                "a model request was cut short: its send-by moment passed before it left"
            );
            return Err(Late(late));
        }
        Ok(last)
    });
    reqwest::Body::wrap_stream(head.chain(tail))
}
