//! Shadow mode: a candidate global chain runs beside the live one on real submissions.
//! Its decisions are recorded and compared, never enforced (the live decision is the
//! one the job gets); `GET /v1/policy/shadow` reports the agreement rate and the cases
//! that differ.
//!
//! A candidate lives in the memory of the gateway it was set on (its results are in
//! the shared store); on a restart or another replica it is simply not running.

use std::sync::Arc;

use serde::Serialize;

use forge_policy_host::Chain;
use forge_policy_host::model::Decision;

use crate::store::LinkRef;

/// A candidate being shadowed.
#[derive(Debug)]
pub struct ShadowCandidate {
    /// Identifies its results in the store.
    pub id: String,
    pub links: Vec<LinkRef>,
    pub chain: Arc<Chain>,
    pub author: String,
    pub comment: String,
    pub started_at_ms: i64,
}

/// What a candidate is, as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateView {
    pub id: String,
    pub plugins: Vec<LinkRef>,
    pub author: String,
    pub comment: String,
    pub started_at_ms: i64,
}

impl ShadowCandidate {
    pub fn view(&self) -> CandidateView {
        CandidateView {
            id: self.id.clone(),
            plugins: self.links.clone(),
            author: self.author.clone(),
            comment: self.comment.clone(),
            started_at_ms: self.started_at_ms,
        }
    }
}

/// The comparable part of a decision: its kind, and the code of a hold or rejection
/// (`admit`, `queue:quota.exceeded`, `reject:storage.rwo-multi-node`).
pub fn summary(d: &Decision) -> String {
    match d {
        Decision::Admit { .. } => "admit".to_string(),
        Decision::Queue { code, .. } => format!("queue:{code}"),
        Decision::Reject { code, .. } => format!("reject:{code}"),
    }
}
