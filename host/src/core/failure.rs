//! Why a task failed: the text the engine, wasm code and people read, and,
//! when a Durable Task SDK worker reported the failure, the worker's own
//! details, kept whole through the journal so that the SDKs read back what
//! they sent (the error's type and message apart, its stack, its cause)
//! and code that branches on an error's type keeps working.

use serde::{Deserialize, Serialize};

/// A failure as an SDK worker reported it (the protocol's
/// `TaskFailureDetails`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureDetails {
    /// The error's type as the worker names it (`builtins.ValueError`).
    pub error_type: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_trace: Option<String>,
    /// The failure that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<Box<FailureDetails>>,
    /// The worker says running it again cannot help: no retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub non_retriable: bool,
}

impl FailureDetails {
    /// How the engine and wasm code read it: `Type: message`.
    pub fn text(&self) -> String {
        if self.error_type.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.error_type, self.message)
        }
    }

    /// Bytes it carries, counted against the history and inbox limits.
    pub fn len(&self) -> usize {
        self.error_type.len()
            + self.message.len()
            + self.stack_trace.as_ref().map_or(0, String::len)
            + self.inner.as_ref().map_or(0, |inner| inner.len())
    }
}

/// Why a task's attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    pub text: String,
    /// The worker's own account, when an SDK worker reported it.
    pub details: Option<Box<FailureDetails>>,
}

impl TaskError {
    /// A failure an SDK worker reported: its text is `Type: message`.
    pub fn reported(details: FailureDetails) -> Self {
        Self {
            text: details.text(),
            details: Some(Box::new(details)),
        }
    }

    /// Whether a retry policy may run it again.
    pub fn retriable(&self) -> bool {
        !self.details.as_ref().is_some_and(|d| d.non_retriable)
    }
}

impl From<String> for TaskError {
    fn from(text: String) -> Self {
        Self {
            text,
            details: None,
        }
    }
}

impl From<&str> for TaskError {
    fn from(text: &str) -> Self {
        text.to_string().into()
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A task's outcome: its result (JSON text), or why it failed.
pub type TaskOutcome = Result<String, TaskError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_read_as_type_and_message_and_survive_a_round_trip() {
        let details = FailureDetails {
            error_type: "builtins.ValueError".into(),
            message: "no tea today".into(),
            stack_trace: Some("  File \"w.py\", line 3".into()),
            inner: Some(Box::new(FailureDetails {
                error_type: String::new(),
                message: "kettle".into(),
                stack_trace: None,
                inner: None,
                non_retriable: false,
            })),
            non_retriable: true,
        };
        let error = TaskError::reported(details.clone());
        assert_eq!(error.text, "builtins.ValueError: no tea today");
        assert!(!error.retriable());
        assert!(TaskError::from("plain").retriable());
        let json = serde_json::to_string(&details).unwrap();
        assert_eq!(
            serde_json::from_str::<FailureDetails>(&json).unwrap(),
            details
        );
        assert_eq!(
            details.inner.as_ref().map(|i| i.text()).as_deref(),
            Some("kettle")
        );
    }
}
