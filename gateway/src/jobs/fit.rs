//! Gang fit: does *every* machine of a job fit on the nodes it may use right now? The
//! gateway dispatches a job only when all of it fits, so the default scheduler (which
//! binds pods one by one) never holds half a job's GPUs while the other half waits —
//! partial placements cannot deadlock the cluster.
//!
//! The check is node-level and asks what the scheduler will: each machine of a pool
//! needs, on one node of the pool's series that matches its node selector and required
//! node affinity and whose `NoSchedule`/`NoExecute` taints its tolerations cover,
//! `gpus_per_node` free GPUs and its CPU and memory free; the job's submitter pod
//! (which selects no node) needs its CPU and memory on any node, of a series or not,
//! its tolerations allow, once the machines are placed. Machines are placed best-fit
//! (the node with the fewest free GPUs that still fits), largest requests first, as a
//! trial; only a complete fit is committed ([`Rooms`], which also keeps a pass over a
//! long queue cheap).
//!
//! A job runs in exactly one fleet (cluster): every machine of a gang is placed on
//! nodes of one fleet, never split; which one is `fit/fleets.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use forge_policy_host::model::{NodeAffinity, Toleration, untolerated};
use rustc_hash::FxHashMap;

use crate::cluster::NodeRoom;
use crate::domain::quantity;

mod best_fit;
mod fleets;
mod free_totals;
use best_fit::Candidates;
use fleets::FleetIx;
use free_totals::FreeTotals;

/// What one pool of a job needs (or its submitter pod: `any_series`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolDemand {
    /// GPU series the pool runs on.
    pub series: String,
    /// The pods may run on a node of any series or of none, not only on `series`'s
    /// (a job's submitter pod, which selects no node); `series` then names the job's
    /// series in a reason only.
    pub any_series: bool,
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
    /// The fleets the pool may run in (its placement's); empty: any.
    pub fleets: Vec<String>,
}

impl PoolDemand {
    /// All GPUs of the pool.
    pub fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// Whether the pool's pods may run on `node` at all (series, selector, affinity).
    fn selects(&self, node: &NodeRoom) -> bool {
        (self.any_series || node.series == self.series)
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
    /// The placement pins the job's pools to fleets no one fleet satisfies (a job is
    /// never split across fleets), or to fleets without GPU nodes.
    Fleets {
        /// The fleets with GPU nodes.
        known: Vec<String>,
    },
    /// The job's machines fit, but then no node its submitter pod may use has the
    /// submitter's CPU and memory free.
    Submitter {
        /// The submitter's CPU, millicores.
        cpu_millis: u64,
        /// The submitter's memory, bytes.
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
            NoFitCause::Fleets { .. } => "capacity.no-fleet",
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
            NoFitCause::Submitter {
                cpu_millis,
                memory_bytes,
            } => write!(
                f,
                "; the job's machines fit, but no node its submitter pod (the driver) may \
                 use also has {} CPU and {} memory free",
                quantity::cpu_quantity(*cpu_millis),
                quantity::bytes_quantity(*memory_bytes)
            ),
            NoFitCause::Fleets { known } => write!(
                f,
                "; no fleet with GPU nodes ({}) is allowed for every pool of the job by its \
                 placement's fleets, and a job runs in exactly one fleet",
                known.join(", ")
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

/// The placement shape of a pool — everything but its machine count: two pools of one
/// shape fit on exactly the same nodes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    gpus_per_node: u32,
    cpu_millis: u64,
    memory_bytes: u64,
    eligible: Eligibility,
}

/// What decides which nodes a pool may use at all (the fleet tried, series, selector,
/// required affinity, tolerations): the same nodes for the whole pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Eligibility {
    fleet: FleetIx,
    series: String,
    any_series: bool,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    required: Vec<forge_policy_host::model::NodeSelectorTerm>,
}

impl Eligibility {
    fn of(pool: &PoolDemand, fleet: FleetIx) -> Self {
        Eligibility {
            fleet,
            series: pool.series.clone(),
            any_series: pool.any_series,
            node_selector: pool.node_selector.clone(),
            tolerations: pool.tolerations.clone(),
            required: pool.affinity.required.clone(),
        }
    }
}

impl Shape {
    fn of(pool: &PoolDemand, fleet: FleetIx) -> Self {
        Shape {
            gpus_per_node: pool.gpus_per_node,
            cpu_millis: pool.cpu_millis,
            memory_bytes: pool.memory_bytes,
            eligible: Eligibility::of(pool, fleet),
        }
    }
}

/// A shape that did not fit: the fewest machines that failed, at which generation of
/// the rooms, and why.
#[derive(Debug, Clone)]
struct Failure {
    nodes: u32,
    generation: u64,
    why: NoFit,
}

/// What is left on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Left {
    gpus: u32,
    cpu_millis: u64,
    memory_bytes: u64,
}

/// What is left after taking `t` (a placement never takes more than is left).
impl std::ops::Sub for Left {
    type Output = Left;

    fn sub(self, t: Left) -> Left {
        Left {
            gpus: self.gpus - t.gpus,
            cpu_millis: self.cpu_millis - t.cpu_millis,
            memory_bytes: self.memory_bytes - t.memory_bytes,
        }
    }
}

/// One more machine's worth taken.
impl std::ops::AddAssign for Left {
    fn add_assign(&mut self, m: Left) {
        self.gpus += m.gpus;
        self.cpu_millis += m.cpu_millis;
        self.memory_bytes += m.memory_bytes;
    }
}

/// The free room of every usable node, as one dispatcher pass reserves it. Built over
/// the capacity cache's rooms (shared, not copied: a pass copies only each node's free
/// numbers), it finds the nodes a pool may use once per shape of pool (series,
/// selector, affinity, tolerations — then a placement compares numbers only), tries a
/// placement without copying (a trial records what it would take and commits only a
/// complete fit), and remembers the shapes that did not fit. Room only shrinks while a
/// pass reserves, so a shape that did not fit with `n` machines does not fit with `n`
/// or more for the rest of the pass: a queue of many jobs of a few shapes costs one
/// real attempt per shape. The best fit for a machine is found by [`Candidates`]
/// (`fit/best_fit.rs`): a scan, or a lookup once a kind of pool is asked often.
#[derive(Debug, Clone, Default)]
pub struct Rooms {
    base: Arc<Vec<NodeRoom>>,
    left: Vec<Left>,
    /// The fleets the nodes are in, in the order they come (the configured order).
    fleets: Vec<String>,
    /// Each node's fleet.
    fleet_of: Vec<FleetIx>,
    /// Whether any node has a taint (only then does a reason look for them).
    any_taints: bool,
    /// Free GPUs of each fleet (by index) and series, kept up to date by every
    /// reservation (what choosing among fleets compares).
    fleet_free: Vec<FxHashMap<String, u64>>,
    by_series: FxHashMap<String, Vec<usize>>,
    /// Each kind of pool seen in the pass → its nodes in `candidates`.
    kinds: FxHashMap<Eligibility, usize>,
    candidates: Vec<Candidates>,
    /// Free GPUs per series on the nodes a set of tolerations covers (for
    /// [`Rooms::totals`]), kept up to date by every reservation.
    usable: FxHashMap<Vec<Toleration>, FreeTotals>,
    /// Bumped by every reservation.
    generation: u64,
    failed: FxHashMap<Shape, Failure>,
}

/// What a trial would take from each node, by index.
type Taken = FxHashMap<usize, Left>;

impl Rooms {
    /// The rooms of `nodes`.
    pub fn new(nodes: impl Into<Arc<Vec<NodeRoom>>>) -> Self {
        let base: Arc<Vec<NodeRoom>> = nodes.into();
        let mut by_series: FxHashMap<String, Vec<usize>> = FxHashMap::default();
        let mut fleets: Vec<String> = Vec::new();
        let mut fleet_of = Vec::with_capacity(base.len());
        for (i, n) in base.iter().enumerate() {
            fleet_of.push(match fleets.iter().position(|f| *f == n.fleet) {
                Some(f) => f,
                None => {
                    fleets.push(n.fleet.clone());
                    fleets.len() - 1
                }
            });
            match by_series.get_mut(n.series.as_str()) {
                Some(v) => v.push(i),
                None => {
                    by_series.insert(n.series.clone(), vec![i]);
                }
            }
        }
        let any_taints = base.iter().any(|n| !n.taints.is_empty());
        let mut fleet_free: Vec<FxHashMap<String, u64>> = vec![FxHashMap::default(); fleets.len()];
        for (n, &f) in base.iter().zip(&fleet_of) {
            *fleet_free[f].entry(n.series.clone()).or_default() += u64::from(n.gpus);
        }
        let left = base
            .iter()
            .map(|n| Left {
                gpus: n.gpus,
                cpu_millis: n.cpu_millis,
                memory_bytes: n.memory_bytes,
            })
            .collect();
        Rooms {
            base,
            left,
            fleets,
            fleet_of,
            any_taints,
            fleet_free,
            by_series,
            kinds: FxHashMap::default(),
            candidates: Vec::new(),
            usable: FxHashMap::default(),
            generation: 0,
            failed: FxHashMap::default(),
        }
    }

    /// Every node's room as it is now (for reading; a copy).
    pub fn nodes(&self) -> Vec<NodeRoom> {
        self.base
            .iter()
            .zip(&self.left)
            .map(|(n, l)| NodeRoom {
                gpus: l.gpus,
                cpu_millis: l.cpu_millis,
                memory_bytes: l.memory_bytes,
                ..n.clone()
            })
            .collect()
    }

    fn series_nodes(&self, series: &str) -> &[usize] {
        self.by_series.get(series).map_or(&[], Vec::as_slice)
    }

    /// The kind of `pool` in `fleet`: which nodes it may use at all (found once per
    /// kind).
    fn kind(&mut self, pool: &PoolDemand, fleet: FleetIx) -> usize {
        let key = Eligibility::of(pool, fleet);
        if let Some(&kind) = self.kinds.get(&key) {
            return kind;
        }
        let every: Vec<usize>;
        let from = if pool.any_series {
            every = (0..self.base.len()).collect();
            &every
        } else {
            self.series_nodes(&pool.series)
        };
        let nodes: Vec<usize> = from
            .iter()
            .copied()
            .filter(|&i| {
                let node = &self.base[i];
                self.fleet_of[i] == fleet && pool.selects(node) && pool.tolerates(node)
            })
            .collect();
        self.candidates.push(Candidates::new(nodes));
        let kind = self.candidates.len() - 1;
        self.kinds.insert(key, kind);
        kind
    }

    /// Places one machine of `pool` (of `kind`) best-fit after `taken`; returns whether
    /// it found room.
    fn place_one(&mut self, pool: &PoolDemand, kind: usize, taken: &mut Taken) -> bool {
        let need = Left {
            gpus: pool.gpus_per_node,
            cpu_millis: pool.cpu_millis,
            memory_bytes: pool.memory_bytes,
        };
        let Some(i) = self.candidates[kind].best(&self.left, need, taken) else {
            return false;
        };
        *taken.entry(i).or_default() += need;
        true
    }

    /// Places every machine of `demands` in `fleet` as a trial: what it would take
    /// from each node, or why the first pool lacking room does not fit. Nothing is
    /// taken.
    fn trial(&mut self, demands: &[PoolDemand], fleet: FleetIx) -> Result<Taken, NoFit> {
        if let Some(why) = self.known_failure(demands, fleet) {
            return Err(why);
        }
        let mut taken = Taken::default();
        let mut order: Vec<&PoolDemand> = demands.iter().collect();
        // Largest first; pods of any series (which may take from any node) last.
        order.sort_by_key(|d| {
            std::cmp::Reverse((!d.any_series, d.gpus_per_node, d.cpu_millis, d.memory_bytes))
        });
        let mut seen_series: Vec<&str> = Vec::new();
        for pool in order {
            // The first pool of its series sees the rooms as they are (the job's other
            // pools took nothing there yet): its failure holds for the shape.
            let first_of_series = !pool.any_series && !seen_series.contains(&pool.series.as_str());
            seen_series.push(&pool.series);
            let kind = self.kind(pool, fleet);
            for _ in 0..pool.nodes {
                if !self.place_one(pool, kind, &mut taken) {
                    let why = self.explain(demands, pool, fleet);
                    // A pod of any series saw the room the job's pools took: its
                    // failure holds for the shape only if it fails on its own.
                    if first_of_series || (pool.any_series && !self.fits_alone(pool, kind)) {
                        self.remember(pool, fleet, &why);
                    }
                    return Err(why);
                }
            }
        }
        Ok(taken)
    }

    /// Whether every machine of `pool` (of `kind`) fits with nothing else taken.
    fn fits_alone(&mut self, pool: &PoolDemand, kind: usize) -> bool {
        let mut taken = Taken::default();
        (0..pool.nodes).all(|_| self.place_one(pool, kind, &mut taken))
    }

    /// Why `demands` cannot fit, if a pool of theirs has the shape of one that did not
    /// fit with as many machines or fewer (re-explained when room was taken since).
    fn known_failure(&mut self, demands: &[PoolDemand], fleet: FleetIx) -> Option<NoFit> {
        if self.failed.is_empty() {
            return None;
        }
        let (pool, shape) = demands.iter().find_map(|p| {
            let shape = Shape::of(p, fleet);
            self.failed
                .get(&shape)
                .is_some_and(|f| f.nodes <= p.nodes)
                .then_some((p, shape))
        })?;
        let generation = self.generation;
        let stale = self
            .failed
            .get(&shape)
            .is_some_and(|f| f.generation != generation);
        if stale {
            let why = self.explain(demands, pool, fleet);
            if let Some(f) = self.failed.get_mut(&shape) {
                f.generation = generation;
                f.why = why;
            }
        }
        let mut why = self.failed.get(&shape)?.why.clone();
        why.needed = demands
            .iter()
            .filter(|d| d.series == pool.series)
            .map(PoolDemand::gpus)
            .sum();
        Some(why)
    }

    fn remember(&mut self, pool: &PoolDemand, fleet: FleetIx, why: &NoFit) {
        let shape = Shape::of(pool, fleet);
        let nodes = self
            .failed
            .get(&shape)
            .map_or(pool.nodes, |f| f.nodes.min(pool.nodes));
        self.failed.insert(
            shape,
            Failure {
                nodes,
                generation: self.generation,
                why: why.clone(),
            },
        );
    }

    fn take(&mut self, taken: &Taken) {
        if taken.is_empty() {
            return;
        }
        for (&i, &t) in taken {
            let (from, to) = (self.left[i], self.left[i] - t);
            for totals in self.usable.values_mut() {
                totals.changed(i, &self.base[i].series, from.gpus, to.gpus);
            }
            for kind in &mut self.candidates {
                kind.moved(i, from, to);
            }
            if let Some(free) = self.fleet_free[self.fleet_of[i]].get_mut(&self.base[i].series) {
                *free -= u64::from(t.gpus);
            }
            self.left[i] = to;
        }
        self.generation += 1;
    }

    /// Free GPUs per series on the nodes `tolerations` let Forge's pods use: (total,
    /// the most on one node).
    pub fn totals(&mut self, tolerations: &[Toleration]) -> BTreeMap<String, (u32, u32)> {
        if let Some(t) = self.usable.get(tolerations) {
            return t.get();
        }
        let base = &self.base;
        let totals = FreeTotals::new(
            base.iter()
                .zip(&self.left)
                .map(|(n, l)| (n.series.as_str(), l.gpus)),
            |i| untolerated(&base[i].taints, tolerations).next().is_none(),
        );
        let out = totals.get();
        self.usable.insert(tolerations.to_vec(), totals);
        out
    }

    /// Why `pool` could not be placed in `fleet` (the rooms as before the attempt).
    ///
    /// A pass explains a shape again after every reservation (its numbers moved), so
    /// this runs once per waiting job of a long queue: the nodes the pool may use are
    /// its kind's, found once, and only rooms with tainted nodes look for taints.
    fn explain(&mut self, demands: &[PoolDemand], pool: &PoolDemand, fleet: FleetIx) -> NoFit {
        let series = pool.series.clone();
        let needed = demands
            .iter()
            .filter(|d| d.series == series)
            .map(PoolDemand::gpus)
            .sum();
        if pool.any_series {
            return NoFit {
                free: self
                    .fleet_free
                    .get(fleet)
                    .and_then(|f| f.get(&series))
                    .copied()
                    .unwrap_or(0),
                series,
                needed,
                cause: NoFitCause::Submitter {
                    cpu_millis: pool.cpu_millis,
                    memory_bytes: pool.memory_bytes,
                },
            };
        }
        let kind = self.kind(pool, fleet);
        let usable = || self.candidates[kind].nodes().iter().map(|&i| self.left[i]);
        let free: u64 = usable().map(|l| u64::from(l.gpus)).sum();
        let tainted: Vec<(&NodeRoom, Left)> = if self.any_taints {
            self.series_nodes(&pool.series)
                .iter()
                .filter(|&&i| self.fleet_of[i] == fleet)
                .map(|&i| (&self.base[i], self.left[i]))
                .filter(|(n, l)| {
                    pool.selects(n) && !pool.tolerates(n) && l.gpus >= pool.gpus_per_node
                })
                .collect()
        } else {
            Vec::new()
        };
        // Whether the pool's machines would fit by their GPUs alone: then CPU or memory
        // is what keeps it out.
        let gpus_fit = pool.gpus_per_node == 0
            || usable()
                .map(|l| u64::from(l.gpus / pool.gpus_per_node))
                .sum::<u64>()
                >= u64::from(pool.nodes);
        let cause = if !tainted.is_empty() {
            let mut taints: Vec<String> = tainted
                .iter()
                .flat_map(|(n, _)| {
                    untolerated(&n.taints, &pool.tolerations).map(ToString::to_string)
                })
                .collect();
            taints.sort();
            taints.dedup();
            NoFitCause::Taints {
                gpus: tainted.iter().map(|(_, l)| u64::from(l.gpus)).sum(),
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
}

#[cfg(test)]
mod tests;
