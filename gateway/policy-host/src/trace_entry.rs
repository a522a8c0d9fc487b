//! [`TraceEntry`]: what one plugin did during a chain's evaluation — recorded with
//! every decision, shown by reviews and submissions, counted in the metrics, and made
//! into the plugin's trace span. Apart from the chain so that a failed evaluation's
//! error (`ChainError`) can carry the trace without the two modules importing each
//! other.

use std::time::SystemTime;

use serde::Serialize;

use crate::model::Decision;

/// What one plugin did during an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEntry {
    pub plugin: String,
    /// The plugin's version label (registry version, else a short digest).
    pub version: String,
    pub digest: String,
    /// `admit`, `queue`, `reject`, or `error`.
    pub outcome: &'static str,
    /// The plugin's decision (absent for `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The failure cause (for `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub elapsed_us: u64,
    /// When the call started (wall clock), for the plugin's trace span; not part of
    /// recorded decisions.
    #[serde(skip)]
    pub started_at: SystemTime,
}
