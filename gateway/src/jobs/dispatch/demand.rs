//! What a job asks of the cluster, and how usage is counted: each pool's demand as
//! placed (series, machines, CPU, memory, where its pods may go) and its submitter
//! pod's (the gang the fit places at once), the machines of a dispatched job the
//! scheduler has not bound yet, the cluster view with a pass's reservations, and the
//! GPUs each team holds and wants (the ledger admission reads) — in all, and as a
//! queued job's request carries them (its team's jobs ahead of it).

use std::collections::BTreeMap;

use forge_policy_host::model::{ClusterView, Placement, SeriesUsage};

use crate::admission::usage::{self, Ledger};
use crate::cluster::labels::{HEAD_GROUP, SUBMITTER_GROUP};
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
                any_series: false,
            }
        })
        .collect()
}

/// Everything a job's gang needs at once in one fleet: its pools' machines
/// ([`demands`]) and, last, its submitter pod ([`submitter`]). A job dispatched
/// whose submitter fits nowhere would hold its GPUs with no driver to use them
/// (KubeRay reports it `Running` once its cluster is ready), so the gang fit counts
/// it, as KubeRay's Kueue and Volcano integrations count it in a gang.
pub fn gang(job: &JobRecord, placement: Option<&Placement>, cfg: &Config) -> Vec<PoolDemand> {
    let mut gang = demands(job, placement, cfg);
    if let Some(s) = submitter(&gang) {
        gang.push(s);
    }
    gang
}

/// The submitter pod of a job whose pools ask `pools`: one machine of no GPUs and
/// the submitter's CPU and memory, on any node of the job's fleet its tolerations
/// (the head's: the first pool's) allow, of any series or none — it has no node
/// selector. Its `series` is the first pool's, for the reason shown when it does
/// not fit.
pub fn submitter(pools: &[PoolDemand]) -> Option<PoolDemand> {
    let head = pools.first()?;
    Some(PoolDemand {
        series: head.series.clone(),
        any_series: true,
        nodes: 1,
        gpus_per_node: 0,
        cpu_millis: manifests::submitter::CPU_MILLIS,
        memory_bytes: manifests::submitter::MEMORY_BYTES,
        node_selector: BTreeMap::new(),
        tolerations: head.tolerations.clone(),
        affinity: Default::default(),
        fleets: head.fleets.clone(),
    })
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

/// The machines of a dispatched job the scheduler has not bound yet, per entry of
/// its [`gang`] (`bound` counts its bound pods per KubeRay group; the head is the
/// primary pool's; the entry after the pools is the submitter).
pub(super) fn unbound(
    job: &JobRecord,
    demand: &PoolDemand,
    index: usize,
    bound: &BTreeMap<(String, String), u32>,
) -> u32 {
    let of = |group: &str| {
        bound
            .get(&(job.id.clone(), group.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let placed = match job.spec.pools.get(index) {
        Some(pool) if index == 0 => of(&pool.name) + of(HEAD_GROUP),
        Some(pool) => of(&pool.name),
        None => of(SUBMITTER_GROUP),
    };
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
        for (i, d) in gang(job, job.placement.as_ref(), cfg)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::jobs::queued_record;

    fn cfg() -> Config {
        Config::from_env_map(crate::config::dev_defaults()).expect("config")
    }

    #[test]
    fn a_gang_is_its_pools_then_its_submitter_on_any_node_of_the_heads_fleets() {
        let job = queued_record("team-a", 1, 0);
        let mut placement = Placement::default();
        placement.pools.push(Default::default());
        placement.pools[0].fleets = vec!["west".into()];
        placement.pools[0].tolerations = vec![forge_policy_host::model::Toleration {
            key: Some("dedicated".into()),
            operator: forge_policy_host::model::TolerationOperator::Exists,
            value: None,
            effect: None,
        }];
        let gang = gang(&job, Some(&placement), &cfg());
        assert_eq!(gang.len(), 2);
        let (pool, submitter) = (&gang[0], &gang[1]);
        assert!(!pool.any_series);
        assert_eq!((pool.series.as_str(), pool.gpus()), ("h200", 8));
        assert!(submitter.any_series);
        assert_eq!(
            (submitter.nodes, submitter.gpus(), submitter.cpu_millis),
            (1, 0, 1_000)
        );
        assert_eq!(submitter.memory_bytes, 1 << 30);
        assert_eq!(submitter.fleets, ["west"]);
        assert_eq!(submitter.tolerations, pool.tolerations, "the head's");
        assert!(
            submitter
                .tolerations
                .iter()
                .any(|t| t.key.as_deref() == Some("dedicated"))
        );
        assert!(submitter.node_selector.is_empty());
    }

    #[test]
    fn a_dispatched_jobs_submitter_is_unbound_until_its_pod_is() {
        let job = queued_record("team-a", 1, 0);
        let gang = gang(&job, None, &cfg());
        let mut bound = BTreeMap::new();
        assert_eq!(unbound(&job, &gang[0], 0, &bound), 1);
        assert_eq!(unbound(&job, &gang[1], 1, &bound), 1);
        bound.insert((job.id.clone(), HEAD_GROUP.to_string()), 1);
        assert_eq!(unbound(&job, &gang[0], 0, &bound), 0, "the head");
        assert_eq!(unbound(&job, &gang[1], 1, &bound), 1, "not the submitter");
        bound.insert((job.id.clone(), SUBMITTER_GROUP.to_string()), 1);
        assert_eq!(unbound(&job, &gang[1], 1, &bound), 0);
    }
}
