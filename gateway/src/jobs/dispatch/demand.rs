//! What a job asks of the cluster, and how usage is counted: each pool's demand as
//! placed (series, machines, CPU, memory, where its pods may go), the machines of a
//! dispatched job the scheduler has not bound yet, the cluster view with a pass's
//! reservations, and the GPUs each team holds and wants (the ledger admission reads)
//! — in all, and as a queued job's request carries them (its team's jobs ahead of it).

use std::collections::BTreeMap;

use forge_policy_host::model::{ClusterView, Placement, SeriesUsage};

use crate::admission::usage::{self, Ledger};
use crate::cluster::labels::HEAD_GROUP;
use crate::config::Config;
use crate::jobs::fit::{PoolDemand, Rooms};
use crate::manifests;
use crate::store::JobRecord;

/// What each pool of a job needs, placed by `placement` (or as the spec asks): its
/// series, machines with their GPUs, CPU and memory, and where its pods may go (the
/// placement's node selector and affinity, the configured tolerations plus the
/// placement's).
pub fn demands(job: &JobRecord, placement: Option<&Placement>, cfg: &Config) -> Vec<PoolDemand> {
    job.spec
        .pools
        .iter()
        .enumerate()
        .map(|(i, pool)| {
            let placed = placement.and_then(|p| p.pools.get(i));
            let series = placed
                .and_then(|p| p.series.clone())
                .or_else(|| pool.series.clone())
                .or_else(|| job.queue_series.clone())
                .unwrap_or_else(|| "unplaced".to_string());
            let (cpu_millis, memory_bytes) = manifests::cpu_and_memory(pool, &series, cfg);
            let mut tolerations = cfg.pods.tolerations.clone();
            tolerations.extend(placed.map(|p| p.tolerations.clone()).unwrap_or_default());
            PoolDemand {
                nodes: pool.nodes,
                gpus_per_node: pool.gpus_per_node,
                cpu_millis,
                memory_bytes,
                node_selector: placed.map(|p| p.node_selector.clone()).unwrap_or_default(),
                tolerations,
                affinity: placed.map(|p| p.affinity.clone()).unwrap_or_default(),
                fleets: placed.map(|p| p.fleets.clone()).unwrap_or_default(),
                series,
            }
        })
        .collect()
}

/// The GPUs each pool of a job takes, and on which series (as [`demands`] places
/// them, without the rest of a demand).
pub(super) fn series_gpus<'a>(
    job: &'a JobRecord,
    placement: Option<&'a Placement>,
) -> impl Iterator<Item = (&'a str, u64)> + 'a {
    job.spec.pools.iter().enumerate().map(move |(i, pool)| {
        let series = placement
            .and_then(|p| p.pools.get(i))
            .and_then(|p| p.series.as_deref())
            .or(pool.series.as_deref())
            .or(job.queue_series.as_deref())
            .unwrap_or("unplaced");
        (
            series,
            u64::from(pool.nodes) * u64::from(pool.gpus_per_node),
        )
    })
}

/// GPUs per team and series: active jobs as running (where they were placed), queued
/// jobs as queued (as they ask).
pub fn ledger_of<J: std::borrow::Borrow<JobRecord>>(
    active: &[J],
    queued: &[J],
    _cfg: &Config,
) -> Ledger {
    let mut ledger = Ledger::new();
    for job in active {
        let job = job.borrow();
        for (series, gpus) in series_gpus(job, job.placement.as_ref()) {
            usage::add(&mut ledger, &job.team, series, gpus, true);
        }
    }
    for job in queued {
        let job = job.borrow();
        for (series, gpus) in series_gpus(job, None) {
            usage::add(&mut ledger, &job.team, series, gpus, false);
        }
    }
    ledger
}

/// The machines of a dispatched job the scheduler has not bound yet, per pool
/// (`bound` counts its bound pods per KubeRay group; the head is the primary pool's).
pub(super) fn unbound(
    job: &JobRecord,
    demand: &PoolDemand,
    pool_index: usize,
    bound: &BTreeMap<(String, String), u32>,
) -> u32 {
    let pool = &job.spec.pools[pool_index].name;
    let of = |group: &str| {
        bound
            .get(&(job.id.clone(), group.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let mut placed = of(pool);
    if pool_index == 0 {
        placed += of(HEAD_GROUP);
    }
    demand.nodes.saturating_sub(placed)
}

/// Takes out of `rooms` the machines of `active` jobs the scheduler has not bound yet
/// (`bound`: [`crate::cluster::Capacity::bound_machines`]; bound ones are in the rooms
/// already).
pub(super) fn reserve_unbound<'a>(
    rooms: &mut Rooms,
    active: impl IntoIterator<Item = &'a JobRecord>,
    bound: &BTreeMap<(String, String), u32>,
    cfg: &Config,
) {
    for job in active {
        for (i, d) in demands(job, job.placement.as_ref(), cfg)
            .into_iter()
            .enumerate()
        {
            let pending = PoolDemand {
                nodes: unbound(job, &d, i, bound),
                ..d
            };
            rooms.reserve_partially(&pending, job.fleet.as_deref());
        }
    }
}

/// The cluster view with the pass's reservations applied (`totals` from
/// [`Rooms::totals`] of the pass's free map).
pub(super) fn adjusted(
    mut view: ClusterView,
    totals: &BTreeMap<String, (u32, u32)>,
) -> ClusterView {
    for s in &mut view.series {
        let (f, largest) = totals.get(&s.series).copied().unwrap_or((0, 0));
        s.free = f;
        s.largest_free_block = largest;
        s.in_use = s.allocatable.saturating_sub(f);
    }
    // One fleet holds every series. With several, each fleet's own series stay as
    // its caches show them (the pass's reservations are summed over the fleets).
    if let [fleet] = view.fleets.as_mut_slice() {
        fleet.series.clone_from(&view.series);
    }
    view
}

/// Counts `job`, which keeps waiting, as queued ahead of its team's later jobs.
pub(super) fn add_ahead<'a>(
    ahead: &mut rustc_hash::FxHashMap<&'a str, BTreeMap<&'a str, u32>>,
    job: &'a JobRecord,
) {
    let mine = ahead.entry(job.team.as_str()).or_default();
    for (series, gpus) in series_gpus(job, None) {
        let g = mine.entry(series).or_default();
        *g = g.saturating_add(u32::try_from(gpus).unwrap_or(u32::MAX));
    }
}

/// A team's usage as a queued job's request carries it: GPUs its active jobs (and
/// the jobs this pass dispatched) hold, and `ahead`, what its jobs queued ahead of
/// this one want, per series.
pub(super) fn usage_ahead(
    ledger: &Ledger,
    team: &str,
    ahead: Option<&BTreeMap<&str, u32>>,
) -> Vec<SeriesUsage> {
    let mut by_series: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for (series, (running, _)) in ledger.get(team).into_iter().flatten() {
        if *running > 0 {
            by_series.entry(series).or_default().0 = *running;
        }
    }
    for (series, queued) in ahead.into_iter().flatten() {
        by_series.entry(*series).or_default().1 = *queued;
    }
    by_series
        .into_iter()
        .map(|(series, (running, queued))| SeriesUsage {
            series: series.to_string(),
            running,
            queued,
        })
        .collect()
}
