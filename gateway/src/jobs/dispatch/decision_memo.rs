//! What the dispatcher remembers of each queued job between passes: the chain's last
//! decision for it and what that decision was made from — the policy snapshot's
//! generation, the cluster view and the team's usage the request carried (the job
//! itself does not change while it is queued), and the teams' shares if the chain
//! read them (they change with every pass's charges, so such a chain is asked every
//! pass). A pass reuses the decision while these are the same, instead of running the chain again: a decision depends only on
//! the chain's settings and the request (the rule every plugin keeps, which replay and
//! shadow rely on too, and which `FORGE_POLICY_VERIFY` checks). So a pass over a long
//! queue where nothing changed costs a comparison per job, and a change costs the
//! evaluations of the jobs it touches: a new policy version, a team's usage (its jobs
//! only), or the cluster view.
//!
//! Only the dispatcher task uses it, one pass at a time: a pass takes the whole table
//! and puts back what it decided ([`DecisionMemo::take`], [`DecisionMemo::keep`]), so
//! no lock is held across an evaluation.

use std::sync::{Arc, Mutex};

use forge_policy_host::model::{ClusterView, SeriesUsage, Shares};

use crate::policy::Evaluated;

/// Remembered decisions by job id.
pub type Table = rustc_hash::FxHashMap<String, Remembered>;

/// One remembered decision.
#[derive(Debug, Clone)]
pub struct Remembered {
    /// The cluster view the request carried.
    pub view: Arc<ClusterView>,
    /// The team's usage the request carried (its playgrounds included).
    pub usage: Arc<Vec<SeriesUsage>>,
    /// The teams' shares the request carried: they matter only to a chain that read
    /// them ([`ChainOutcome::reads_shares`](forge_policy_host::ChainOutcome)).
    pub shares: Shares,
    /// The decision, its trace and the policy versions (and generation) that made it.
    pub evaluated: Evaluated,
}

impl Remembered {
    /// Whether this decision stands for a request of `view`, `usage` and `shares`
    /// under policy `generation` (the shares count only if the chain read them).
    pub fn holds(
        &self,
        generation: u64,
        view: &Arc<ClusterView>,
        usage: &Arc<Vec<SeriesUsage>>,
        shares: &Shares,
    ) -> bool {
        self.evaluated.generation == generation
            && (Arc::ptr_eq(&self.view, view) || *self.view == **view)
            && (Arc::ptr_eq(&self.usage, usage) || *self.usage == **usage)
            && (!self.evaluated.outcome.reads_shares || self.shares.same(shares))
    }
}

/// The dispatcher's remembered decisions, by job id.
#[derive(Debug, Default)]
pub struct DecisionMemo {
    entries: Mutex<Table>,
}

impl DecisionMemo {
    /// The whole table, for one pass.
    pub fn take(&self) -> Table {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What a pass decided for the jobs still queued after it (the rest is forgotten).
    pub fn keep(&self, entries: Table) {
        *self.entries.lock().unwrap_or_else(|e| e.into_inner()) = entries;
    }

    /// How many decisions are remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use forge_policy_host::ChainOutcome;
    use forge_policy_host::model::{Decision, SeriesCapacity};

    use super::*;

    fn remembered(generation: u64, free: u32) -> Remembered {
        Remembered {
            view: Arc::new(ClusterView {
                fleets: Vec::new(),
                series: vec![SeriesCapacity {
                    series: "h100".into(),
                    free,
                    ..SeriesCapacity::default()
                }],
                ..ClusterView::default()
            }),
            usage: Arc::new(vec![]),
            shares: Shares::default(),
            evaluated: Evaluated {
                outcome: ChainOutcome {
                    decision: Decision::Queue {
                        code: "quota.exceeded".into(),
                        message: "over".into(),
                    },
                    digests: vec![],
                    trace: vec![],
                    reads_shares: false,
                },
                global_version: 1,
                team_version: None,
                label: "global@1".into(),
                generation,
            },
        }
    }

    #[test]
    fn a_decision_holds_for_the_same_policy_view_and_usage_only() {
        let r = remembered(7, 8);
        let same_view = Arc::new((*r.view).clone());
        let usage = Arc::new(vec![]);
        let shares = Shares::default();
        assert!(r.holds(7, &r.view, &usage, &shares), "the same view");
        assert!(r.holds(7, &same_view, &usage, &shares), "an equal view");
        assert!(!r.holds(8, &same_view, &usage, &shares), "another policy");
        let other = remembered(7, 0).view;
        assert!(!r.holds(7, &other, &usage, &shares), "another view");
        let used = Arc::new(vec![SeriesUsage {
            series: "h100".into(),
            running: 8,
            queued: 0,
        }]);
        assert!(!r.holds(7, &same_view, &used, &shares), "other usage");
        // New shares matter only to a chain that read them.
        assert!(
            r.holds(7, &same_view, &usage, &Shares::default()),
            "not read"
        );
        let mut reader = r.clone();
        reader.evaluated.outcome.reads_shares = true;
        assert!(reader.holds(7, &same_view, &usage, &reader.shares.clone()));
        assert!(
            !reader.holds(7, &same_view, &usage, &Shares::default()),
            "read, and new"
        );
        let memo = DecisionMemo::default();
        memo.keep(Table::from_iter([("j".to_string(), r)]));
        assert_eq!(memo.len(), 1);
        assert_eq!(memo.take().len(), 1);
        assert!(memo.is_empty(), "taken for the pass");
    }
}
