//! The limits plugin calls run under: the engine's defaults and maxima
//! ([`EngineLimits`], set by the operator) and one plugin's own deadline and memory cap
//! ([`PluginLimits`], chosen when it is registered and never above the maxima).
//!
//! Components built from Python or JavaScript carry an interpreter: tens of MiB of
//! code, an initial heap of several MiB and a millisecond-scale first call. They need
//! more memory and time than Rust plugins, so the limits are per plugin; the maxima
//! bound what any plugin may ask for and size the engine's instance pool.

use std::time::Duration;

use crate::compile::CompileLimits;
use crate::error::LoadError;
use crate::isolation::{Isolation, Verify};
use crate::precheck::ShapeLimits;

/// Limits and tuning of the policy sandbox as a whole.
#[derive(Debug, Clone)]
pub struct EngineLimits {
    /// Default per-call wall-clock deadline of a plugin (FORGE_POLICY_DEADLINE_MS).
    pub deadline: Duration,
    /// Default cap of a plugin's linear memory (FORGE_POLICY_MEMORY_MIB).
    pub memory_cap_bytes: usize,
    /// Largest deadline a plugin may be given (FORGE_POLICY_MAX_DEADLINE_MS).
    pub max_deadline: Duration,
    /// Largest memory cap a plugin may be given (FORGE_POLICY_MAX_MEMORY_MIB); the size
    /// of every memory slot of the pooling allocator.
    pub max_memory_cap_bytes: usize,
    /// Plugin instances that may be alive at once (sizes the pooling allocator).
    pub max_instances: u32,
    /// Largest component accepted for compilation.
    pub max_component_bytes: usize,
    /// Bounds on a component's shape, checked before compiling and by the pooling
    /// allocator.
    pub shape: ShapeLimits,
    /// Compile threads, queue and time limit.
    pub compile: CompileLimits,
    /// Fresh instance per call, or warm instances reused (FORGE_POLICY_ISOLATION).
    pub isolation: Isolation,
    /// Calls a warm instance serves before it is discarded.
    pub warm_max_calls: u32,
    /// Debug comparison of warm decisions against a fresh instance
    /// (FORGE_POLICY_VERIFY).
    pub verify: Verify,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            deadline: Duration::from_millis(50),
            memory_cap_bytes: 32 << 20,
            max_deadline: Duration::from_secs(1),
            max_memory_cap_bytes: 256 << 20,
            max_instances: 256,
            max_component_bytes: 64 << 20,
            shape: ShapeLimits::default(),
            compile: CompileLimits::default(),
            isolation: Isolation::Warm,
            warm_max_calls: 1_000,
            verify: Verify::OFF,
        }
    }
}

impl EngineLimits {
    /// The limits of a plugin registered without limits of its own.
    pub fn plugin_defaults(&self) -> PluginLimits {
        PluginLimits {
            deadline: self.deadline,
            memory_cap_bytes: self.memory_cap_bytes,
        }
    }

    /// The largest memory cap any plugin can get (the maximum, or the default if the
    /// default is larger).
    pub(crate) fn memory_slot_bytes(&self) -> usize {
        self.max_memory_cap_bytes.max(self.memory_cap_bytes)
    }

    /// Check a plugin's limits against the maxima.
    pub fn check(&self, limits: &PluginLimits) -> Result<(), LoadError> {
        if limits.deadline.is_zero() || limits.deadline > self.max_deadline.max(self.deadline) {
            return Err(LoadError::Limits(format!(
                "a deadline of {} ms is outside 1..={} ms",
                limits.deadline.as_millis(),
                self.max_deadline.max(self.deadline).as_millis()
            )));
        }
        if limits.memory_cap_bytes == 0 || limits.memory_cap_bytes > self.memory_slot_bytes() {
            return Err(LoadError::Limits(format!(
                "a memory cap of {} bytes is outside 1..={} bytes",
                limits.memory_cap_bytes,
                self.memory_slot_bytes()
            )));
        }
        Ok(())
    }
}

/// One plugin's per-call limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Wall-clock deadline of one call (instantiation included).
    pub deadline: Duration,
    /// Cap of the plugin instance's linear memory, initial size included.
    pub memory_cap_bytes: usize,
}

impl PluginLimits {
    /// The deadline in whole milliseconds, for messages.
    pub fn deadline_ms(&self) -> u64 {
        u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX)
    }
}
