//! Retry policies of agent calls and activities, and the bounds the host puts
//! on them: a guest may ask for anything, the host caps attempts and delays so
//! that a policy of `u32::MAX` attempts with no delay cannot spin forever.

use serde::{Deserialize, Serialize};

/// How a failed agent call or activity is retried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub first_delay_ms: u64,
    pub backoff_coefficient: f64,
    pub max_delay_ms: u64,
}

/// The host's bounds on every retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryLimits {
    /// Most attempts of one task, the first included.
    pub max_attempts: u32,
    /// Shortest pause between two attempts.
    pub min_delay_ms: u64,
    /// Longest pause between two attempts.
    pub max_delay_ms: u64,
}

impl Default for RetryLimits {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            min_delay_ms: 10,
            max_delay_ms: 24 * 3_600_000,
        }
    }
}

/// Largest backoff coefficient honoured; beyond it delays overflow anyway.
const MAX_COEFFICIENT: f64 = 100.0;

impl RetryPolicy {
    /// The policy as the host runs it: within `limits`, with a finite
    /// coefficient of at least 1.
    pub fn bounded(self, limits: &RetryLimits) -> Self {
        let coefficient = if self.backoff_coefficient.is_finite() {
            self.backoff_coefficient.clamp(1.0, MAX_COEFFICIENT)
        } else {
            1.0
        };
        let max_delay = self
            .max_delay_ms
            .clamp(limits.min_delay_ms, limits.max_delay_ms);
        Self {
            max_attempts: self.max_attempts.clamp(1, limits.max_attempts.max(1)),
            first_delay_ms: self.first_delay_ms.clamp(limits.min_delay_ms, max_delay),
            backoff_coefficient: coefficient,
            max_delay_ms: max_delay,
        }
    }

    /// The pause before the attempt after `attempt` (attempts count from 0),
    /// or `None` when no attempt is left. Never overflows.
    pub fn delay_after(&self, attempt: u32) -> Option<u64> {
        if attempt.saturating_add(1) >= self.max_attempts {
            return None;
        }
        let coefficient = if self.backoff_coefficient.is_finite() {
            self.backoff_coefficient.max(1.0)
        } else {
            1.0
        };
        let factor = coefficient.powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        let delay = (self.first_delay_ms as f64 * factor).min(self.max_delay_ms as f64);
        Some(if delay.is_finite() && delay >= 0.0 {
            delay as u64
        } else {
            self.max_delay_ms
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_and_stop_at_max_attempts() {
        let policy = RetryPolicy {
            max_attempts: 4,
            first_delay_ms: 100,
            backoff_coefficient: 2.0,
            max_delay_ms: 300,
        };
        assert_eq!(policy.delay_after(0), Some(100));
        assert_eq!(policy.delay_after(1), Some(200));
        assert_eq!(policy.delay_after(2), Some(300));
        assert_eq!(policy.delay_after(3), None);
    }

    #[test]
    fn an_unbounded_guest_policy_is_capped_by_the_host() {
        let greedy = RetryPolicy {
            max_attempts: u32::MAX,
            first_delay_ms: 0,
            backoff_coefficient: f64::INFINITY,
            max_delay_ms: u64::MAX,
        };
        let limits = RetryLimits {
            max_attempts: 5,
            min_delay_ms: 10,
            max_delay_ms: 1_000,
        };
        let bounded = greedy.bounded(&limits);
        assert_eq!(bounded.max_attempts, 5);
        assert_eq!(bounded.first_delay_ms, 10);
        assert_eq!(bounded.max_delay_ms, 1_000);
        assert_eq!(bounded.backoff_coefficient, 1.0);
        assert_eq!(bounded.delay_after(3), Some(10));
        assert_eq!(bounded.delay_after(4), None);
    }

    #[test]
    fn delay_arithmetic_never_overflows() {
        let policy = RetryPolicy {
            max_attempts: u32::MAX,
            first_delay_ms: u64::MAX,
            backoff_coefficient: MAX_COEFFICIENT,
            max_delay_ms: u64::MAX,
        };
        assert_eq!(policy.delay_after(u32::MAX), None);
        assert!(policy.delay_after(u32::MAX - 2).is_some());
        let zero = RetryPolicy {
            max_attempts: 0,
            ..policy
        };
        assert_eq!(zero.delay_after(0), None);
    }
}
