//! The memory a guest may grow to: refused past the grant, and remembered,
//! so a failed call is reported as "memory limit" rather than a bare trap.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wasmtime::ResourceLimiter;

pub(crate) struct MemoryLimit {
    pub max: usize,
    pub hit: Arc<AtomicBool>,
}

impl MemoryLimit {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            hit: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
