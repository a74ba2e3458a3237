//! Engine configuration and the epoch ticker that bounds guest CPU time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::engine_tick::TICK;
use super::{error, LoadError, RuntimeConfig};

/// Memory a reused pooling slot keeps resident (and zeroes itself) rather
/// than returning to the kernel.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// The pooling allocator makes instantiation cheap (tens of µs) for the
/// short-lived instances of tool calls; its slots are virtual-memory
/// reservations, so their number is bounded by `max_instances`.
pub fn build(config: &RuntimeConfig) -> Result<Engine, LoadError> {
    let mut pool = PoolingAllocationConfig::default();
    let instances = config.max_instances.max(1);
    // A Rust component has one main module plus small shim modules, each with
    // its own tables; memories are usually one or two.
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(4))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .total_stacks(instances)
        .max_memory_size(config.limits.memory_bytes)
        // Every episode and tool call is a fresh instance, so slots are reused
        // thousands of times a second. Resetting a slot's memory with
        // `madvise` flushed TLBs on every core and page-faulted it back in on
        // reuse (a tenth of a sequence step's CPU); the pages a guest touched
        // are instead found with PAGEMAP_SCAN and zeroed in place, up to this
        // much per slot (before Linux 6.7 the whole of it is zeroed).
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .pagemap_scan(Enabled::Auto);
    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&wasm).map_err(|e| LoadError::Engine(error::describe(&e)))
}

/// Advances the engine's epoch every [`TICK`] until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
            .ok();
        Self { stop, thread }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
