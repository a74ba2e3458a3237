//! The epoch tick: the unit the engine's CPU budgets are counted in, shared
//! by the ticker that advances the epoch and the stores that set deadlines.

use std::time::Duration;

/// One epoch tick; CPU limits are counted in these.
pub const TICK: Duration = Duration::from_millis(10);
