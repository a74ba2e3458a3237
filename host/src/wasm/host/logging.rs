//! The `logging` import: a guest's log lines become the host's `tracing`
//! events, tagged with the component's name.
//!
//! A line is the guest's text, so it is bounded and made harmless before it
//! reaches the operator's log: control characters (a newline that starts a
//! forged host line, `\r`, terminal escapes) are written escaped, a line is
//! cut at [`MAX_LINE_BYTES`], and each component may write
//! [`LINES_PER_SECOND`] lines a second across all its instances (its
//! `NAME.toml` may set `log_lines_per_second`); what is over is dropped and
//! counted, and the count is logged once the next second begins.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};

use super::GuestState;
use crate::wasm::bindings::agenthost::host::logging;

/// The longest line written; the rest is cut, and the cut said.
pub(crate) const MAX_LINE_BYTES: usize = 4096;
/// Lines a component may write a second, by default.
pub(crate) const LINES_PER_SECOND: u32 = 200;

/// What the import needs: whose lines these are, and their budget.
pub(crate) struct Logging {
    pub component: Arc<str>,
    pub budget: Arc<LogBudget>,
    /// Lines are dropped unwritten and uncounted (a replay check's run).
    pub muted: bool,
}

pub(super) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    logging::add_to_linker::<_, HasSelf<Logging>>(linker, |s| &mut s.logging)
}

impl logging::Host for Logging {
    fn log(&mut self, level: logging::Level, message: String) -> wasmtime::Result<()> {
        if self.muted {
            return Ok(());
        }
        let component = &*self.component;
        match self.budget.take(Instant::now()) {
            Take::Write { dropped_before: 0 } => {}
            Take::Write { dropped_before } => tracing::warn!(
                component,
                dropped = dropped_before,
                "the component wrote more log lines than its share (log_lines_per_second in its NAME.toml); the lines over it were dropped"
            ),
            Take::FirstDropped => {
                tracing::warn!(
                    component,
                    per_second = self.budget.per_second,
                    "the component is writing more log lines than its share (log_lines_per_second in its NAME.toml): dropping the rest of this second's, counted"
                );
                return Ok(());
            }
            Take::Drop => return Ok(()),
        }
        let message = harmless(&message);
        match level {
            logging::Level::Trace => tracing::trace!(component, "{message}"),
            logging::Level::Debug => tracing::debug!(component, "{message}"),
            logging::Level::Info => tracing::info!(component, "{message}"),
            logging::Level::Warn => tracing::warn!(component, "{message}"),
            logging::Level::Error => tracing::error!(component, "{message}"),
        }
        Ok(())
    }
}

/// One component's share of the log: lines a second, across its instances.
#[derive(Debug)]
pub struct LogBudget {
    per_second: u32,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    began: Option<Instant>,
    written: u32,
    /// Dropped since the last line written.
    dropped: u64,
    /// Whether this window dropped one yet.
    dropping: bool,
}

/// Whether a line may be written now.
#[derive(Debug, PartialEq, Eq)]
enum Take {
    /// Yes; `dropped_before` lines were dropped in the windows since the
    /// last one written (to be said once).
    Write {
        dropped_before: u64,
    },
    /// No: the first line this second over the share (said, once).
    FirstDropped,
    Drop,
}

impl LogBudget {
    pub fn new(per_second: u32) -> Self {
        Self {
            per_second: per_second.max(1),
            window: Mutex::new(Window {
                began: None,
                written: 0,
                dropped: 0,
                dropping: false,
            }),
        }
    }

    fn take(&self, now: Instant) -> Take {
        // A poisoned lock only means another guest call panicked while
        // counting: the counts are still numbers.
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fresh = window
            .began
            .is_none_or(|began| now.saturating_duration_since(began) >= Duration::from_secs(1));
        if fresh {
            window.began = Some(now);
            window.written = 0;
            window.dropping = false;
        }
        if window.written >= self.per_second {
            window.dropped = window.dropped.saturating_add(1);
            let first = !std::mem::replace(&mut window.dropping, true);
            return if first {
                Take::FirstDropped
            } else {
                Take::Drop
            };
        }
        window.written += 1;
        Take::Write {
            dropped_before: std::mem::take(&mut window.dropped),
        }
    }
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new(LINES_PER_SECOND)
    }
}

/// The line as the operator's log may hold it: control characters escaped
/// (`\n`, `\r`, `\t`, `\u{1b}`…), at most [`MAX_LINE_BYTES`].
fn harmless(message: &str) -> Cow<'_, str> {
    let clean = !message.chars().any(char::is_control);
    if clean && message.len() <= MAX_LINE_BYTES {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len().min(MAX_LINE_BYTES) + 32);
    for (at, c) in message.char_indices() {
        if out.len() >= MAX_LINE_BYTES {
            let _ = write!(out, "… ({} bytes more)", message.len() - at);
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_cannot_forge_another_or_reach_the_terminal_and_is_bounded() {
        let forged = "ok\n2026-12-06T00:00:00Z  INFO agenthost::server: listening\r\u{1b}[2J";
        let written = harmless(forged);
        assert!(!written.chars().any(char::is_control), "{written}");
        assert_eq!(
            written,
            "ok\\n2026-12-06T00:00:00Z  INFO agenthost::server: listening\\r\\u{1b}[2J"
        );
        assert!(matches!(harmless("plain words"), Cow::Borrowed(_)));
        let long = "é".repeat(10_000);
        let cut = harmless(&long);
        assert!(cut.len() < MAX_LINE_BYTES + 64, "{}", cut.len());
        assert!(cut.ends_with("bytes more)"), "{}", &cut[cut.len() - 40..]);
    }

    #[test]
    fn a_component_writes_its_share_a_second_and_the_rest_is_counted_then_said() {
        let budget = LogBudget::new(3);
        let start = Instant::now();
        let takes: Vec<Take> = (0..5).map(|_| budget.take(start)).collect();
        assert_eq!(
            takes,
            [
                Take::Write { dropped_before: 0 },
                Take::Write { dropped_before: 0 },
                Take::Write { dropped_before: 0 },
                Take::FirstDropped,
                Take::Drop
            ]
        );
        let later = start + Duration::from_millis(1000);
        assert_eq!(budget.take(later), Take::Write { dropped_before: 2 });
        assert_eq!(budget.take(later), Take::Write { dropped_before: 0 });
    }
}
