//! The policy store's interface ([`PolicyStore`]) and its records: registered plugins,
//! versions of each policy scope (`global`, `team:<name>`), shadow results and the
//! recorded decisions a candidate chain is replayed against.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::FairShareSettings;

/// A registered plugin (its bytes live in object storage under its digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRecord {
    /// `global` (admin-managed) or the owning team.
    pub owner: String,
    pub name: String,
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    pub size: u64,
    pub description: String,
    /// The WIT world it implements.
    pub world: String,
    /// Who uploaded it (token name, else team).
    pub uploaded_by: String,
    pub uploaded_at_ms: i64,
    /// Memory cap of its instances in MiB, if registered with one (else the operator's
    /// default, `FORGE_POLICY_MEMORY_MIB`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Per-call deadline in ms, if registered with one (else `FORGE_POLICY_DEADLINE_MS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// One link of a stored chain: which plugin (resolved to its digest) and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkRef {
    pub owner: String,
    pub name: String,
    pub version: String,
    pub digest: String,
    pub settings: serde_json::Value,
}

/// One version of a scope's chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVersion {
    /// `global` or `team:<name>`.
    pub scope: String,
    pub version: u64,
    pub plugins: Vec<LinkRef>,
    /// Fair-share weights (global scope only; shown when set).
    #[serde(skip_serializing_if = "FairShareSettings::is_default")]
    pub fair_share: FairShareSettings,
    /// The version that was active before this one (0: none).
    pub from_version: u64,
    /// `bootstrap`, `put` or `rollback`.
    pub action: String,
    pub author: String,
    pub comment: String,
    pub at_ms: i64,
}

/// A version to append.
#[derive(Debug, Clone)]
pub struct NewVersion {
    pub scope: String,
    /// The version the writer believes is current (0 for a scope with none).
    pub expected: u64,
    pub plugins: Vec<LinkRef>,
    /// Fair-share weights (default for team scopes).
    pub fair_share: FairShareSettings,
    pub action: &'static str,
    pub author: String,
    pub comment: String,
}

/// A recorded decision to replay a candidate against.
#[derive(Debug, Clone)]
pub struct RecentDecision {
    pub job_id: String,
    pub team: String,
    pub kind: String,
    pub code: Option<String>,
    pub request: serde_json::Value,
}

/// One shadow comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowResult {
    pub job_id: String,
    pub team: String,
    /// What the live chain decided (`kind` or `kind:code`).
    pub live: String,
    /// What the candidate would have decided.
    pub shadow: String,
    pub agree: bool,
    pub at_ms: i64,
}

/// Agreement of a shadow candidate so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowCounts {
    pub compared: u64,
    pub agreed: u64,
}

/// Durable policy state: the plugin registry's metadata, every version of every policy
/// scope with who changed it and why, shadow-mode results, and the recent decisions a
/// candidate is replayed on.
///
/// Replicas sharing the database see the same versions: [`PolicyStore::append`] is a
/// compare-and-set on the scope's current version, so two writers (on one gateway or
/// several) cannot both move a scope from `v` to `v+1`; [`PolicyStore::heads`] is the
/// cheap query replicas poll.
#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// Registers a plugin. Re-registering identical bytes under the same
    /// (owner, name, version) returns the existing record (`false`: not new); other
    /// bytes under a taken version are [`StoreError::PluginVersionExists`].
    async fn insert_plugin(&self, rec: PluginRecord) -> Result<(PluginRecord, bool), StoreError>;
    /// A plugin by owner, name and version.
    async fn plugin(
        &self,
        owner: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<PluginRecord>, StoreError>;
    /// A plugin of one of `owners` (tried in order) by digest.
    async fn plugin_by_digest(
        &self,
        owners: Vec<String>,
        digest: &str,
    ) -> Result<Option<PluginRecord>, StoreError>;
    /// Plugins of the given owners (`None`: all), by owner, name, version.
    async fn plugins(&self, owners: Option<Vec<String>>) -> Result<Vec<PluginRecord>, StoreError>;
    /// How many plugins an owner has and their total size in bytes.
    async fn owner_usage(&self, owner: &str) -> Result<(u64, u64), StoreError>;
    /// The current version of every scope that has one.
    async fn heads(&self) -> Result<BTreeMap<String, u64>, StoreError>;
    /// One version of a scope (`None` for `version`: the current one).
    async fn version(
        &self,
        scope: &str,
        version: Option<u64>,
    ) -> Result<Option<PolicyVersion>, StoreError>;
    /// Appends a version if the scope is still at `expected`; the new version is
    /// `expected + 1`. A mismatch is [`StoreError::VersionConflict`].
    async fn append(&self, v: NewVersion) -> Result<PolicyVersion, StoreError>;
    /// A scope's versions, newest first.
    async fn history(&self, scope: &str, limit: u32) -> Result<Vec<PolicyVersion>, StoreError>;
    /// The latest `n` decisions that carry their policy request, newest first,
    /// optionally of one team.
    async fn recent_decisions(
        &self,
        team: Option<String>,
        n: u32,
    ) -> Result<Vec<RecentDecision>, StoreError>;
    /// Records one shadow comparison of candidate `candidate`.
    async fn record_shadow(&self, candidate: &str, r: ShadowResult) -> Result<(), StoreError>;
    /// Counts and the latest `limit` disagreements of candidate `candidate`, over
    /// every team's jobs (`team: None`) or one team's.
    async fn shadow_report(
        &self,
        candidate: &str,
        team: Option<String>,
        limit: u32,
    ) -> Result<(ShadowCounts, Vec<ShadowResult>), StoreError>;
    /// A feed that changes when any replica appends a version (PostgreSQL's
    /// `LISTEN/NOTIFY`), so replicas need not wait for their next poll; `None` when the
    /// backend has none (replicas poll [`PolicyStore::heads`]).
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}
