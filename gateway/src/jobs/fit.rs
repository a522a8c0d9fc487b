//! Gang fit: does *every* machine of a job fit in the free GPUs of its series right
//! now? The gateway dispatches a job only when all of it fits, so the default
//! scheduler (which binds pods one by one) never holds half a job's GPUs while the
//! other half waits — partial placements cannot deadlock the cluster.
//!
//! The check is node-level: each machine of a pool needs `gpus_per_node` GPUs on one
//! node of the pool's series. Machines are placed best-fit (the node with the least
//! free GPUs that still fits), largest requests first, on a copy of the free map; only
//! a complete fit is committed.

use std::collections::BTreeMap;

use crate::cluster::capacity::FreeByNode;

/// What one pool of a job needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDemand {
    /// GPU series the pool runs on.
    pub series: String,
    /// Machines.
    pub nodes: u32,
    /// GPUs per machine.
    pub gpus_per_node: u32,
}

impl PoolDemand {
    /// All GPUs of the pool.
    pub fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }
}

/// Why a job does not fit (shown as the queued job's reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoFit {
    /// The series that lacks room.
    pub series: String,
    /// GPUs the job needs there.
    pub needed: u64,
    /// GPUs free there (on schedulable nodes, after reservations).
    pub free: u64,
}

impl std::fmt::Display for NoFit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "waiting for room: needs {} {} GPUs on whole machines, {} free",
            self.needed, self.series, self.free
        )
    }
}

/// Places every machine of `demands` in `free`, subtracting what it takes. On success
/// `free` is updated; on failure it is unchanged and the first series lacking room
/// is returned.
pub fn reserve(free: &mut FreeByNode, demands: &[PoolDemand]) -> Result<(), NoFit> {
    let mut trial = free.clone();
    let mut order: Vec<&PoolDemand> = demands.iter().collect();
    order.sort_by_key(|d| std::cmp::Reverse(d.gpus_per_node));
    for pool in order {
        let nodes = trial.entry(pool.series.clone()).or_default();
        for _ in 0..pool.nodes {
            let best = nodes
                .iter_mut()
                .filter(|f| **f >= pool.gpus_per_node)
                .min_by_key(|f| **f);
            match best {
                Some(slot) => *slot -= pool.gpus_per_node,
                None => {
                    let series = pool.series.clone();
                    let needed = demands
                        .iter()
                        .filter(|d| d.series == series)
                        .map(PoolDemand::gpus)
                        .sum();
                    let free_now = free
                        .get(&series)
                        .map_or(0, |n| n.iter().map(|g| u64::from(*g)).sum());
                    return Err(NoFit {
                        series,
                        needed,
                        free: free_now,
                    });
                }
            }
        }
    }
    *free = trial;
    Ok(())
}

/// Takes `gpus` GPUs of `series` from the fullest-used nodes first, as far as they go
/// (reservation of a dispatched job whose pods are not bound yet; where exactly they
/// will bind is the scheduler's choice, so this is an estimate by count).
pub fn take(free: &mut FreeByNode, series: &str, mut gpus: u64) {
    if let Some(nodes) = free.get_mut(series) {
        nodes.sort_unstable();
        for slot in nodes.iter_mut() {
            if gpus == 0 {
                break;
            }
            let t = u64::from(*slot).min(gpus);
            *slot -= u32::try_from(t).unwrap_or(*slot);
            gpus -= t;
        }
    }
}

/// Total free GPUs per series.
pub fn totals(free: &FreeByNode) -> BTreeMap<String, (u32, u32)> {
    free.iter()
        .map(|(s, nodes)| {
            (
                s.clone(),
                (
                    nodes.iter().sum::<u32>(),
                    nodes.iter().copied().max().unwrap_or(0),
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(spec: &[(&str, &[u32])]) -> FreeByNode {
        spec.iter()
            .map(|(s, n)| (s.to_string(), n.to_vec()))
            .collect()
    }

    fn pool(series: &str, nodes: u32, gpus: u32) -> PoolDemand {
        PoolDemand {
            series: series.into(),
            nodes,
            gpus_per_node: gpus,
        }
    }

    #[test]
    fn whole_job_or_nothing() {
        let mut f = free(&[("h100", &[8, 8, 4])]);
        assert!(reserve(&mut f, &[pool("h100", 2, 8)]).is_ok());
        assert_eq!(f["h100"], vec![0, 0, 4]);
        let err = reserve(&mut f, &[pool("h100", 2, 4)]).expect_err("only one 4-slot left");
        assert_eq!((err.needed, err.free), (8, 4));
        assert_eq!(f["h100"], vec![0, 0, 4], "a failed fit changes nothing");
    }

    #[test]
    fn total_free_is_not_enough_without_whole_machines() {
        // 8 free GPUs in total, but no node has 8.
        let mut f = free(&[("h100", &[4, 4])]);
        let err = reserve(&mut f, &[pool("h100", 1, 8)]).expect_err("fragmented");
        assert_eq!(
            err.to_string(),
            "waiting for room: needs 8 h100 GPUs on whole machines, 8 free"
        );
    }

    #[test]
    fn best_fit_keeps_big_holes_for_big_machines() {
        let mut f = free(&[("h100", &[8, 2])]);
        assert!(reserve(&mut f, &[pool("h100", 1, 2), pool("h100", 1, 8)]).is_ok());
        assert_eq!(f["h100"], vec![0, 0]);
    }

    #[test]
    fn pools_of_several_series_must_all_fit() {
        let mut f = free(&[("h100", &[8]), ("h200", &[])]);
        let err = reserve(&mut f, &[pool("h100", 1, 8), pool("h200", 1, 8)]).expect_err("h200");
        assert_eq!(err.series, "h200");
        assert_eq!(f["h100"], vec![8]);
        let err = reserve(&mut f, &[pool("a100", 1, 1)]).expect_err("unknown series");
        assert_eq!((err.series.as_str(), err.free), ("a100", 0));
    }

    #[test]
    fn take_reserves_by_count() {
        let mut f = free(&[("h100", &[8, 3])]);
        take(&mut f, "h100", 5);
        assert_eq!(f["h100"], vec![0, 6]);
        take(&mut f, "h100", 100);
        assert_eq!(f["h100"], vec![0, 0]);
        assert_eq!(totals(&f)["h100"], (0, 0));
    }
}
