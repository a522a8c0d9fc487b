//! Gang fit: does *every* machine of a job fit on the nodes it may use right now? The
//! gateway dispatches a job only when all of it fits, so the default scheduler (which
//! binds pods one by one) never holds half a job's GPUs while the other half waits —
//! partial placements cannot deadlock the cluster.
//!
//! The check is node-level and asks what the scheduler will: each machine of a pool
//! needs, on one node of the pool's series that matches its node selector and required
//! node affinity and whose `NoSchedule`/`NoExecute` taints its tolerations cover,
//! `gpus_per_node` free GPUs and its CPU and memory free. Machines are placed best-fit
//! (the node with the fewest free GPUs that still fits), largest requests first, on a
//! copy of the rooms; only a complete fit is committed.

use std::collections::BTreeMap;

use forge_policy_host::model::{NodeAffinity, Toleration, untolerated};

use crate::cluster::NodeRoom;
use crate::domain::quantity;

/// What one pool of a job needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolDemand {
    /// GPU series the pool runs on.
    pub series: String,
    /// Machines.
    pub nodes: u32,
    /// GPUs per machine.
    pub gpus_per_node: u32,
    /// CPU per machine, millicores.
    pub cpu_millis: u64,
    /// Memory per machine, bytes.
    pub memory_bytes: u64,
    /// Node labels the pods select (beyond the series).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods (the configured ones and the placement's).
    pub tolerations: Vec<Toleration>,
    /// Required node affinity of the pods.
    pub affinity: NodeAffinity,
}

impl PoolDemand {
    /// All GPUs of the pool.
    pub fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// Whether the pool's pods may run on `node` at all (series, selector, affinity).
    fn selects(&self, node: &NodeRoom) -> bool {
        node.series == self.series
            && self
                .node_selector
                .iter()
                .all(|(k, v)| node.labels.get(k) == Some(v))
            && self.affinity.admits(&node.labels)
    }

    fn tolerates(&self, node: &NodeRoom) -> bool {
        untolerated(&node.taints, &self.tolerations)
            .next()
            .is_none()
    }

    fn fits(&self, node: &NodeRoom) -> bool {
        node.gpus >= self.gpus_per_node
            && node.cpu_millis >= self.cpu_millis
            && node.memory_bytes >= self.memory_bytes
    }

    fn take_from(&self, node: &mut NodeRoom) {
        node.gpus -= self.gpus_per_node;
        node.cpu_millis -= self.cpu_millis;
        node.memory_bytes -= self.memory_bytes;
    }
}

/// Why a job does not fit (shown as the queued job's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoFit {
    /// The series that lacks room.
    pub series: String,
    /// GPUs the job needs there.
    pub needed: u64,
    /// GPUs free there (on nodes the job may use, after reservations).
    pub free: u64,
    /// What keeps it out.
    pub cause: NoFitCause,
}

/// What keeps a job out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoFitCause {
    /// Not enough free GPUs on whole machines.
    Gpus,
    /// Enough GPUs, but no node has the CPU or memory a machine needs free.
    CpuOrMemory {
        /// CPU per machine, millicores.
        cpu_millis: u64,
        /// Memory per machine, bytes.
        memory_bytes: u64,
    },
    /// The room is on nodes whose taints the job does not tolerate.
    Taints {
        /// Free GPUs on those nodes.
        gpus: u64,
        /// The taints, as `key=value:Effect`.
        taints: Vec<String>,
    },
}

impl NoFit {
    /// The stable code of the queued job's standing.
    pub fn code(&self) -> &'static str {
        match self.cause {
            NoFitCause::Taints { .. } => "capacity.tainted",
            _ => "capacity.no-room",
        }
    }
}

impl std::fmt::Display for NoFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "waiting for room: needs {} {} GPUs on whole machines, {} free",
            self.needed, self.series, self.free
        )?;
        match &self.cause {
            NoFitCause::Gpus => Ok(()),
            NoFitCause::CpuOrMemory {
                cpu_millis,
                memory_bytes,
            } => write!(
                f,
                "; no node with the GPUs also has {} CPU and {} memory free per machine",
                quantity::cpu_quantity(*cpu_millis),
                quantity::bytes_quantity(*memory_bytes)
            ),
            NoFitCause::Taints { gpus, taints } => write!(
                f,
                "; {gpus} more are on nodes with taints the job does not tolerate ({}): \
                 tolerate them with FORGE_K8S_GPU_TOLERATIONS or a global policy",
                taints.join(", ")
            ),
        }
    }
}

/// Places one machine of `pool` best-fit; returns whether it found room.
fn place_one(rooms: &mut [NodeRoom], pool: &PoolDemand) -> bool {
    let best = rooms
        .iter_mut()
        .filter(|n| pool.selects(n) && pool.tolerates(n) && pool.fits(n))
        .min_by_key(|n| (n.gpus, n.cpu_millis, n.memory_bytes));
    match best {
        Some(node) => {
            pool.take_from(node);
            true
        }
        None => false,
    }
}

/// Why `pool` could not be placed in `rooms` (which are as before the attempt).
fn explain(rooms: &[NodeRoom], demands: &[PoolDemand], pool: &PoolDemand) -> NoFit {
    let series = pool.series.clone();
    let needed = demands
        .iter()
        .filter(|d| d.series == series)
        .map(PoolDemand::gpus)
        .sum();
    let usable = rooms
        .iter()
        .filter(|n| pool.selects(n) && pool.tolerates(n));
    let free: u64 = usable.clone().map(|n| u64::from(n.gpus)).sum();
    let tainted: Vec<&NodeRoom> = rooms
        .iter()
        .filter(|n| pool.selects(n) && !pool.tolerates(n) && n.gpus >= pool.gpus_per_node)
        .collect();
    let gpus_fit = usable.clone().any(|n| n.gpus >= pool.gpus_per_node);
    let cause = if !tainted.is_empty() {
        let mut taints: Vec<String> = tainted
            .iter()
            .flat_map(|n| untolerated(&n.taints, &pool.tolerations).map(ToString::to_string))
            .collect();
        taints.sort();
        taints.dedup();
        NoFitCause::Taints {
            gpus: tainted.iter().map(|n| u64::from(n.gpus)).sum(),
            taints,
        }
    } else if gpus_fit {
        NoFitCause::CpuOrMemory {
            cpu_millis: pool.cpu_millis,
            memory_bytes: pool.memory_bytes,
        }
    } else {
        NoFitCause::Gpus
    };
    NoFit {
        series,
        needed,
        free,
        cause,
    }
}

/// Places every machine of `demands` in `rooms`, subtracting what it takes. On success
/// `rooms` is updated; on failure it is unchanged and why the first pool lacking room
/// does not fit is returned.
pub fn reserve(rooms: &mut Vec<NodeRoom>, demands: &[PoolDemand]) -> Result<(), NoFit> {
    let mut trial = rooms.clone();
    let mut order: Vec<&PoolDemand> = demands.iter().collect();
    order.sort_by_key(|d| std::cmp::Reverse((d.gpus_per_node, d.cpu_millis, d.memory_bytes)));
    for pool in order {
        for _ in 0..pool.nodes {
            if !place_one(&mut trial, pool) {
                return Err(explain(rooms, demands, pool));
            }
        }
    }
    *rooms = trial;
    Ok(())
}

/// Places as many machines of `pool` as fit (a dispatched job's machines the scheduler
/// has not bound yet: they will take room, though where exactly is its choice).
pub fn reserve_partially(rooms: &mut [NodeRoom], pool: &PoolDemand) {
    for _ in 0..pool.nodes {
        if !place_one(rooms, pool) {
            return;
        }
    }
}

/// Free GPUs per series on the nodes `tolerations` let Forge's pods use: (total, the
/// most on one node).
pub fn totals(rooms: &[NodeRoom], tolerations: &[Toleration]) -> BTreeMap<String, (u32, u32)> {
    let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for n in rooms
        .iter()
        .filter(|n| untolerated(&n.taints, tolerations).next().is_none())
    {
        let e = out.entry(n.series.clone()).or_default();
        e.0 += n.gpus;
        e.1 = e.1.max(n.gpus);
    }
    out
}

#[cfg(test)]
mod tests;
