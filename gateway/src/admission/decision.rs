//! What an admission outcome means for the job: the decision as it is recorded (kind,
//! code, message, field, per-plugin trace, the versions that decided and the request
//! the chain saw, kept for replays), and the series queue the job waits in.

use forge_policy_host::ChainOutcome;
use forge_policy_host::model::{Decision, PolicyRequest};

use crate::jobspec::JobSpec;
use crate::store::NewDecision;

/// The decision as stored. `request` is kept so candidate chains can be replayed
/// against the decision.
pub fn decision_record(
    job_id: &str,
    team: &str,
    outcome: &ChainOutcome,
    policy: &str,
    request: Option<&PolicyRequest>,
) -> NewDecision {
    let (code, message, field) = match &outcome.decision {
        Decision::Admit { .. } => (None, None, None),
        Decision::Queue { code, message } => (Some(code.clone()), Some(message.clone()), None),
        Decision::Reject {
            code,
            message,
            field,
        } => (Some(code.clone()), Some(message.clone()), field.clone()),
    };
    NewDecision {
        job_id: job_id.to_string(),
        team: team.to_string(),
        kind: outcome.decision.kind().to_string(),
        code,
        message,
        field,
        plugins: serde_json::to_value(&outcome.trace).unwrap_or_default(),
        chain_version: policy.to_string(),
        request: request.and_then(|r| serde_json::to_value(r).ok()),
    }
}

/// The series a job queues on: its primary pool's series as placed (when admitted),
/// else as requested, else `unplaced`.
pub fn primary_series(spec: &JobSpec, decision: Option<&Decision>) -> String {
    if let Some(Decision::Admit { placement, .. }) = decision
        && let Some(series) = placement.pools.first().and_then(|p| p.series.clone())
    {
        return series;
    }
    spec.primary()
        .and_then(|p| p.series.clone())
        .unwrap_or_else(|| "unplaced".to_string())
}

/// The series a job waits on after `outcome`: where the decision places it, else
/// where the chain had placed it before a plugin held it (a quota hold keeps the
/// series the pool maps to), else as requested (`unplaced` when nothing says).
pub fn waiting_series(spec: &JobSpec, outcome: &ChainOutcome) -> String {
    let series = primary_series(spec, Some(&outcome.decision));
    if series != "unplaced" {
        return series;
    }
    outcome
        .trace
        .iter()
        .rev()
        .filter_map(|t| t.decision.as_ref())
        .find_map(|d| match d {
            Decision::Admit { placement, .. } => placement.pools.first()?.series.clone(),
            _ => None,
        })
        .unwrap_or(series)
}

/// The plugin that rejected, from the trace.
pub fn rejecting_plugin(outcome: &ChainOutcome) -> Option<String> {
    outcome
        .trace
        .iter()
        .find(|t| t.outcome == "reject")
        .map(|t| t.plugin.clone())
}
