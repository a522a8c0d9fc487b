//! The policy's say on a planned preemption (contract 0.3.0's `plan-preemption`): the
//! global chain first (its links may accept, reorder or veto), then the chain of each
//! team whose jobs are among the candidates, in team order (its links may only veto,
//! and only about a plan holding its jobs). Off the async workers, on the policy
//! runner like an evaluation; any failure — a plugin's, or a team chain that is
//! unavailable — fails closed: no preemption.

use std::collections::BTreeSet;
use std::sync::Arc;

use forge_policy_host::preemption::{PlanOutcome, PreemptionPlan};

use super::active::Scope;
use super::error::EvalError;
use super::manager::PolicyManager;

impl PolicyManager {
    /// The order to preempt `plan`'s candidates in, or the veto that stops it.
    pub async fn plan_preemption(
        self: &Arc<Self>,
        plan: PreemptionPlan,
    ) -> Result<PlanOutcome, EvalError> {
        let teams: BTreeSet<String> = plan.candidates.iter().map(|v| v.team.clone()).collect();
        let active = self.current.load_full();
        for team in &teams {
            if let Some(u) = active.unavailable(team) {
                return Err(EvalError::ScopeUnavailable {
                    scope: Scope::Team(team.clone()).key(),
                    version: u.version,
                    reason: u.reason.clone(),
                });
            }
        }
        let outcome = self
            .runner
            .run_as("preemption", move || {
                let mut order = match active.global().chain.plan_preemption(&plan, None)? {
                    PlanOutcome::Proceed { order } => order,
                    vetoed => return Ok(vetoed),
                };
                for team in &teams {
                    let Some(own) = active.scope(&Scope::Team(team.clone())) else {
                        continue;
                    };
                    let shown = plan.reordered(&order);
                    match own.chain.plan_preemption(&shown, Some(team))? {
                        PlanOutcome::Proceed { order: o } => order = o,
                        vetoed => return Ok(vetoed),
                    }
                }
                Ok::<_, forge_policy_host::ChainError>(PlanOutcome::Proceed { order })
            })
            .await?;
        Ok(outcome.map_err(forge_policy_host::RunError::from)?)
    }
}
