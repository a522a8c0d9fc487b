//! The shared wasmtime engine for policy plugins: configuration (pooling allocator
//! with per-component limits, epoch interruption), the import linker, the epoch ticker
//! thread, the compile pool, the verified precompile cache and the limits every call
//! runs under.
//!
//! One `PolicyEngine` serves every chain and every plugin version; it is cheap to clone.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::PrecompileCache;
use crate::compile::CompilePool;
use crate::error::LoadError;
use crate::isolation::Isolation;
use crate::limits::EngineLimits;
use crate::sandbox::HostState;
use crate::{wit_v0_1_0, wit_v0_2_0, wit_v0_3_0};

/// Bytes of each linear memory and table reset in place (only the pages the last
/// instance dirtied, found with Linux's `PAGEMAP_SCAN`) instead of `madvise`d away.
const KEEP_RESIDENT: usize = 2 << 20;

/// How often the epoch advances; deadlines are counted in these ticks.
const EPOCH_TICK: Duration = Duration::from_millis(1);

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    limits: EngineLimits,
    cache: Option<PrecompileCache>,
    compiler: CompilePool,
    stop: Arc<AtomicBool>,
    /// Components compiled by this engine (precompile-cache misses).
    compilations: AtomicU64,
    /// Precompiled files that failed verification.
    cache_rejections: AtomicU64,
    /// Warm instances idle in all pools (each holds a slot of the instance pool).
    warm_idle: AtomicUsize,
    /// Calls served by reused instances, for sampling comparisons.
    verify_seq: AtomicU64,
    /// Comparisons in which the warm and the fresh decision differed.
    verify_mismatches: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The engine, linker and limits shared by all plugins.
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("limits", &self.inner.limits)
            .field("cache", &self.inner.cache)
            .finish()
    }
}

impl PolicyEngine {
    /// Build the engine. `cache_dir`, if given, holds precompiled components keyed by
    /// content digest and engine compatibility, so restarts do not recompile; each is
    /// verified before it is loaded (`crate::cache`).
    pub fn new(limits: EngineLimits, cache_dir: Option<PathBuf>) -> Result<Self, LoadError> {
        let mut pool = PoolingAllocationConfig::default();
        let instances = limits.max_instances.max(1);
        let shape = limits.shape;
        pool.total_component_instances(instances)
            .max_core_instances_per_component(shape.max_core_instances)
            .max_memories_per_component(shape.max_memories)
            .max_tables_per_component(shape.max_tables)
            .total_core_instances(instances.saturating_mul(4))
            .total_memories(instances.saturating_mul(2))
            .total_tables(instances.saturating_mul(4))
            .max_memory_size(limits.memory_slot_bytes())
            .max_unused_warm_slots(instances.min(64))
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .decommit_batch_size(16);

        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .parallel_compilation(true)
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| LoadError::Compile(format!("{e:#}")))?;

        let mut linker: Linker<HostState> = Linker::new(&engine);
        // Every supported contract version's host interface, side by side (their
        // interface names carry the version, so they never clash).
        wit_v0_1_0::Policy::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Compile(format!("linking 0.1.0 host imports: {e:#}")))?;
        wit_v0_2_0::Policy::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Compile(format!("linking 0.2.0 host imports: {e:#}")))?;
        wit_v0_3_0::Policy::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Compile(format!("linking 0.3.0 host imports: {e:#}")))?;

        let cache = cache_dir
            .as_deref()
            .map(PrecompileCache::open)
            .transpose()?;
        let compiler = CompilePool::start(&engine, limits.compile)?;

        let stop = Arc::new(AtomicBool::new(false));
        spawn_ticker(engine.clone(), stop.clone());
        Ok(PolicyEngine {
            inner: Arc::new(Inner {
                engine,
                linker,
                limits,
                cache,
                compiler,
                stop,
                compilations: AtomicU64::new(0),
                cache_rejections: AtomicU64::new(0),
                warm_idle: AtomicUsize::new(0),
                verify_seq: AtomicU64::new(0),
                verify_mismatches: AtomicU64::new(0),
            }),
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// The limits calls run under.
    pub fn limits(&self) -> &EngineLimits {
        &self.inner.limits
    }

    /// How many components this engine has compiled (as opposed to loading their
    /// precompiled form from the cache). A restart that finds its cache compiles none.
    pub fn compilations(&self) -> u64 {
        self.inner.compilations.load(Ordering::Relaxed)
    }

    /// Whether calls reuse warm instances or get fresh ones.
    pub fn isolation(&self) -> Isolation {
        self.inner.limits.isolation
    }

    /// Warm instances idle right now, across every chain of this engine.
    pub fn warm_idle(&self) -> usize {
        self.inner.warm_idle.load(Ordering::Relaxed)
    }

    /// Reserve room for one more idle warm instance. Idle instances may hold at most
    /// half of the instance pool, so fresh calls and settings checks always find slots.
    pub(crate) fn reserve_warm(&self) -> bool {
        let cap = usize::try_from(self.inner.limits.max_instances / 2).unwrap_or(usize::MAX);
        self.inner
            .warm_idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// `n` idle warm instances were taken or dropped.
    pub(crate) fn release_warm(&self, n: usize) {
        self.inner.warm_idle.fetch_sub(n, Ordering::AcqRel);
    }

    /// Whether this call of a reused instance is one to compare against a fresh one.
    pub(crate) fn verify_due(&self) -> bool {
        let every = u64::from(self.inner.limits.verify.every);
        every > 0
            && self
                .inner
                .verify_seq
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every)
    }

    pub(crate) fn count_mismatch(&self) {
        self.inner.verify_mismatches.fetch_add(1, Ordering::Relaxed);
    }

    /// Comparisons (`FORGE_POLICY_VERIFY`) in which a reused instance decided
    /// differently than a fresh one.
    pub fn verify_mismatches(&self) -> u64 {
        self.inner.verify_mismatches.load(Ordering::Relaxed)
    }

    pub(crate) fn count_compilation(&self) {
        self.inner.compilations.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cache(&self) -> Option<&PrecompileCache> {
        self.inner.cache.as_ref()
    }

    pub(crate) fn compiler(&self) -> &CompilePool {
        &self.inner.compiler
    }

    pub(crate) fn count_cache_rejection(&self) {
        self.inner.cache_rejections.fetch_add(1, Ordering::Relaxed);
    }

    /// Precompiled files that failed verification and were compiled again.
    pub fn cache_rejections(&self) -> u64 {
        self.inner.cache_rejections.load(Ordering::Relaxed)
    }

    /// Epoch ticks that make up a per-call deadline.
    pub(crate) fn deadline_ticks(deadline: Duration) -> u64 {
        let tick = EPOCH_TICK.as_micros().max(1);
        let ticks = deadline.as_micros().div_ceil(tick);
        // +1: the current tick may be almost over when the call starts.
        u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// A fresh store with the sandbox installed; each plugin call sets its own memory
    /// cap and deadline in it ([`HostState::enter`]).
    pub(crate) fn new_store(&self) -> wasmtime::Store<HostState> {
        let mut store = wasmtime::Store::new(
            &self.inner.engine,
            HostState::new(self.inner.limits.memory_cap_bytes),
        );
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        store.set_epoch_deadline(Self::deadline_ticks(self.inner.limits.deadline));
        store
    }

    /// A hex key identifying this engine's compiled-code compatibility.
    pub(crate) fn compatibility_key(&self) -> String {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: stable across processes of the same build.
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        self.inner
            .engine
            .precompile_compatibility_hash()
            .hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

/// Advance the engine's epoch every tick until the engine is dropped.
fn spawn_ticker(engine: Engine, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("forge-policy-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
    if let Err(e) = spawned {
        // Without a ticker no deadline could fire; the host must not run unbounded.
        tracing::error!("cannot start the policy epoch ticker: {e}");
        std::process::abort();
    }
}
