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

/// What one `--max-instances` slot holds of the engine's pool. A Rust
/// component instantiates 3 core modules, a JavaScript one 4, a Python one
/// (componentize-py) 14, each with one memory and two tables: one slot
/// holds any of them. A component that needs more takes several slots per
/// instance ([`slots_per_instance`]), so the pool can never run out before
/// the host's slots do (a call then waits for a slot; a pool that runs out
/// fails the call, and every other component's too).
const CORE_INSTANCES_PER_SLOT: u32 = 16;
const MEMORIES_PER_SLOT: u32 = 2;
const TABLES_PER_SLOT: u32 = 4;

/// The pooling allocator makes instantiation cheap (tens of µs) for the
/// short-lived instances of tool calls; its slots are virtual-memory
/// reservations, so their number is bounded by `max_instances`.
pub fn build(config: &RuntimeConfig) -> Result<Engine, LoadError> {
    let mut pool = PoolingAllocationConfig::default();
    let instances = config.max_instances.max(1);
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_SLOT))
        .total_memories(instances.saturating_mul(MEMORIES_PER_SLOT))
        .total_tables(instances.saturating_mul(TABLES_PER_SLOT))
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

/// How many `--max-instances` slots one instance of `component` (compiled
/// from `bytes`) takes: enough for its core instances, memories and tables
/// at [`CORE_INSTANCES_PER_SLOT`] and the others a slot.
pub(super) fn slots_per_instance(component: &wasmtime::component::Component, bytes: &[u8]) -> u32 {
    let per = |needed: u32, per_slot: u32| needed.div_ceil(per_slot);
    // Memories and tables as wasmtime counts them (each module times its
    // instantiations); `None` when it cannot tell, and the counts below
    // stand alone.
    let (memories, tables) = component
        .resources_required()
        .map_or((0, 0), |r| (r.num_memories, r.num_tables));
    let (mut core_instances, mut defined_memories, mut defined_tables) = (0u32, 0u32, 0u32);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(wasmparser::Payload::InstanceSection(instances)) => {
                core_instances += instances
                    .into_iter()
                    .filter(|i| matches!(i, Ok(wasmparser::Instance::Instantiate { .. })))
                    .count() as u32;
            }
            Ok(wasmparser::Payload::MemorySection(section)) => defined_memories += section.count(),
            Ok(wasmparser::Payload::TableSection(section)) => defined_tables += section.count(),
            // The engine compiled these bytes: they parse.
            _ => {}
        }
    }
    per(core_instances, CORE_INSTANCES_PER_SLOT)
        .max(per(memories.max(defined_memories), MEMORIES_PER_SLOT))
        .max(per(tables.max(defined_tables), TABLES_PER_SLOT))
        .max(1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A component instantiating one core module `instances` times, the
    /// module defining `memories` memories and `tables` tables.
    fn component(instances: u32, memories: u32, tables: u32) -> Vec<u8> {
        use wasm_encoder::{
            Component, InstanceSection, MemorySection, MemoryType, Module, ModuleArg,
            ModuleSection, RefType, TableSection, TableType,
        };
        let mut module = Module::new();
        let mut tables_section = TableSection::new();
        for _ in 0..tables {
            tables_section.table(TableType {
                element_type: RefType::FUNCREF,
                table64: false,
                minimum: 1,
                maximum: None,
                shared: false,
            });
        }
        module.section(&tables_section);
        let mut memories_section = MemorySection::new();
        for _ in 0..memories {
            memories_section.memory(MemoryType {
                minimum: 1,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            });
        }
        module.section(&memories_section);
        let mut component = Component::new();
        component.section(&ModuleSection(&module));
        let mut instances_section = InstanceSection::new();
        for _ in 0..instances {
            instances_section.instantiate(0, Vec::<(&str, ModuleArg)>::new());
        }
        component.section(&instances_section);
        component.finish()
    }

    fn slots(instances: u32, memories: u32, tables: u32) -> u32 {
        let mut config = Config::new();
        config.wasm_component_model(true).wasm_multi_memory(true);
        let engine = Engine::new(&config).expect("an engine");
        let bytes = component(instances, memories, tables);
        let compiled = wasmtime::component::Component::new(&engine, &bytes).expect("compiles");
        slots_per_instance(&compiled, &bytes)
    }

    #[test]
    fn an_instance_takes_the_slots_its_modules_memories_and_tables_need() {
        // The shapes the toolchains emit fit one slot: Python's 14 modules
        // (one of which holds the memory), Rust's 3.
        assert_eq!(slots(14, 0, 0), 1);
        assert_eq!(slots(16, 0, 0), 1);
        assert_eq!(slots(1, 1, 2), 1);
        assert_eq!(slots(1, 2, 4), 1);
        // Past a slot's share of any of them, more slots.
        assert_eq!(slots(17, 0, 0), 2);
        assert_eq!(slots(40, 0, 0), 3);
        assert_eq!(slots(1, 3, 0), 2);
        // Each instantiation of a module has its own memories and tables.
        assert_eq!(slots(2, 2, 0), 2);
        assert_eq!(slots(3, 0, 2), 2);
        assert_eq!(slots(1, 0, 0), 1);
    }
}
