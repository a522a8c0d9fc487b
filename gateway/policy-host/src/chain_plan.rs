//! A chain's say on a planned preemption (contract 0.3.0's `plan-preemption`).
//!
//! The host asks the global chain first: its links run in order, a `reorder` changes
//! the order the next link sees and a `veto` ends planning. Then each team whose jobs
//! are among the candidates is asked through its own chain, whose links may only
//! accept or veto; a team chain is not asked about a plan that holds none of its jobs.
//! Links built against 0.1.0 or 0.2.0 have no `plan-preemption` and accept. Any failure
//! (trap, deadline, a reorder that is not a permutation) fails closed: no preemption.

use crate::chain::Chain;
use crate::error::ChainError;
use crate::preemption::{PlanOutcome, PlanVerdict, PreemptionPlan};

impl Chain {
    /// Run this chain's links over `plan`. `team`: this chain is that team's own links
    /// (they may only veto, and are asked only when a candidate is of the team);
    /// `None`: the global chain.
    pub fn plan_preemption(
        &self,
        plan: &PreemptionPlan,
        team: Option<&str>,
    ) -> Result<PlanOutcome, ChainError> {
        if team.is_some_and(|t| !plan.concerns(t)) {
            return Ok(PlanOutcome::Proceed {
                order: plan.order(),
            });
        }
        let mut current = plan.clone();
        for link in self.links() {
            let plugin = &link.plugin;
            let verdict = plugin
                .plan_preemption(&link.settings, &current, team.is_some())
                .map_err(|source| ChainError {
                    trace: Box::default(),
                    plugin: plugin.name().to_string(),
                    version: plugin.version().to_string(),
                    digest: plugin.digest().to_string(),
                    source,
                })?;
            match verdict {
                PlanVerdict::Accept => {}
                PlanVerdict::Reorder { order } => current = current.reordered(&order),
                PlanVerdict::Veto { code, message } => {
                    return Ok(PlanOutcome::Vetoed {
                        plugin: plugin.name().to_string(),
                        code,
                        message,
                    });
                }
            }
        }
        Ok(PlanOutcome::Proceed {
            order: current.order(),
        })
    }
}
