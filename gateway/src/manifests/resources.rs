//! What one machine of a pool gets: CPU and memory (requests = limits, so Ray pods are
//! never BestEffort and a namespace ResourceQuota on CPU or memory admits them) and the
//! Ray object store, resolved from the pool, else the `FORGE_K8S_*_PER_NODE` settings
//! for its series — and the `ray start` parameters consistent with them.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::domain::quantity;
use crate::jobspec::{MIN_OBJECT_STORE_BYTES, PoolSpec};

use super::BuildError;

/// Share of a machine's memory the object store gets by default (Ray's own default).
const OBJECT_STORE_SHARE: f64 = 0.3;

/// The resources of one machine of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineResources {
    /// CPU, millicores.
    pub cpu_millis: u64,
    /// Memory (request = limit), bytes; includes the object store.
    pub memory_bytes: u64,
    /// Ray object store, bytes.
    pub object_store_bytes: u64,
}

/// CPU millicores and memory bytes of a machine of `pool` on `series`.
pub fn cpu_and_memory(pool: &PoolSpec, series: &str, cfg: &Config) -> (u64, u64) {
    let cpu = pool
        .cpus_per_node
        .map_or_else(|| cfg.pods.cpu_millis(series), |c| u64::from(c) * 1000);
    let memory = pool
        .memory_bytes()
        .unwrap_or_else(|| cfg.pods.memory_bytes(series));
    (cpu, memory)
}

/// The resources of a machine of `pool` placed on `series`.
pub fn machine_resources(
    pool: &PoolSpec,
    series: &str,
    cfg: &Config,
) -> Result<MachineResources, BuildError> {
    let (cpu_millis, memory_bytes) = cpu_and_memory(pool, series, cfg);
    let object_store_bytes = match pool
        .object_store_bytes()
        .or_else(|| cfg.pods.object_store_memory.get(series).copied())
    {
        Some(b) => b,
        None => {
            let share = (memory_bytes as f64 * OBJECT_STORE_SHARE) as u64;
            let shm = quantity::bytes(&cfg.k8s.shm_size).unwrap_or(u64::MAX);
            share.min(shm).max(MIN_OBJECT_STORE_BYTES)
        }
    };
    if object_store_bytes >= memory_bytes {
        return Err(BuildError::InvalidResources {
            pool: pool.name.clone(),
            reason: format!(
                "the object store ({}) must be smaller than the memory ({})",
                quantity::bytes_quantity(object_store_bytes),
                quantity::bytes_quantity(memory_bytes)
            ),
        });
    }
    Ok(MachineResources {
        cpu_millis,
        memory_bytes,
        object_store_bytes,
    })
}

/// `ray start` resource parameters: `num-cpus` (whole CPUs, rounded up like KubeRay),
/// `memory` (what tasks and actors may use: the memory less the object store) and
/// `object-store-memory`.
pub fn ray_resource_params(m: &MachineResources) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "num-cpus".to_string(),
            m.cpu_millis.div_ceil(1000).max(1).to_string(),
        ),
        (
            "memory".to_string(),
            (m.memory_bytes - m.object_store_bytes).to_string(),
        ),
        (
            "object-store-memory".to_string(),
            m.object_store_bytes.to_string(),
        ),
    ])
}
