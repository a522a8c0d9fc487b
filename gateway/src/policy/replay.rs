//! Replaying a candidate chain against recent recorded decisions: what would have been
//! decided differently (`"replay": N` of `PUT /v1/policy`), before anything changes.

use std::sync::Arc;

use forge_policy_host::Chain;
use forge_policy_host::model::PolicyRequest;
use serde::Serialize;

use super::active::Scope;
use super::error::PolicyAdminError;
use super::manager::PolicyManager;
use super::shadow::summary;

/// One decision replayed on a candidate.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayDifference {
    pub job_id: String,
    pub team: String,
    pub recorded: String,
    pub candidate: String,
}

/// A candidate replayed against recent decisions.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    pub compared: u64,
    pub changed: u64,
    /// The first differences (at most 100).
    pub differences: Vec<ReplayDifference>,
}

impl PolicyManager {
    /// Replay `candidate` (as `scope`'s chain) against the latest `n` recorded
    /// decisions (of that team, for a team scope).
    pub async fn replay(
        &self,
        scope: &Scope,
        candidate: &Arc<Chain>,
        n: u32,
    ) -> Result<ReplayReport, PolicyAdminError> {
        let team = match scope {
            Scope::Global => None,
            Scope::Team(t) => Some(t.clone()),
        };
        let recent = self.store.recent_decisions(team, n).await?;
        let active = self.current();
        let mut report = ReplayReport::default();
        for d in recent {
            let Ok(request) = serde_json::from_value::<PolicyRequest>(d.request) else {
                continue;
            };
            let chain = match scope {
                Scope::Global => active.select_with_global(&d.team, candidate),
                Scope::Team(_) => active.select_with_team(candidate),
            };
            let result = self
                .runner
                .run(move || chain.evaluate(&request))
                .await
                .map_err(|e| PolicyAdminError::task("replaying a decision", e))?;
            let candidate_says = match result {
                Ok(o) => summary(&o.decision),
                Err(e) => format!("error:{}", e.source.cause()),
            };
            let recorded = match &d.code {
                Some(c) => format!("{}:{c}", d.kind),
                None => d.kind.clone(),
            };
            report.compared += 1;
            if recorded != candidate_says {
                report.changed += 1;
                if report.differences.len() < 100 {
                    report.differences.push(ReplayDifference {
                        job_id: d.job_id,
                        team: d.team,
                        recorded,
                        candidate: candidate_says,
                    });
                }
            }
        }
        Ok(report)
    }
}
