//! The job store's interface: jobs, their state history, admission decisions and the
//! gateway queue, behind the [`JobStore`] trait (implemented by [`super::sqlite`] and
//! [`super::postgres`]).
//!
//! Guarantees every implementation gives:
//! - [`JobStore::insert`] returns only after the job is durably committed, so an
//!   acknowledged submission survives a crash;
//! - [`JobStore::transition`] is a compare-and-set on the current state: two racing
//!   writers cannot both move a job, the loser gets [`StoreError::Conflict`];
//! - every state change (including the initial one) is appended to the history in the
//!   same transaction;
//! - a transition that carries a [`Fence`] commits only while the fence's lease is
//!   still at the fence's epoch, checked in the same transaction: once another replica
//!   has taken the lease, a deposed leader's writes are refused with
//!   [`StoreError::Fenced`].

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use forge_policy_host::model::Placement;

use super::StoreError;
use super::checkpoints::{Checkpoint, CheckpointOutcome};
use super::dispatch_journal::PassRecord;
use super::job_feed::StoredChange;
use super::preemptions::{AdmittedTerms, PreemptionRecord, PreemptionWrite};
use super::usage::{Accrual, UsageRecord};
use crate::domain::{Digest, JobState};
use crate::jobspec::JobSpec;

/// Most jobs one list page returns.
pub const MAX_PAGE: u32 = 500;

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    /// Gateway-assigned id (see [`new_job_id`]).
    pub id: String,
    /// Owning team.
    pub team: String,
    /// The spec's name.
    pub name: String,
    /// The validated spec.
    pub spec: JobSpec,
    /// Current state.
    pub state: JobState,
    /// Why it is in this state (hold / rejection / failure reason), if known.
    pub reason: Option<String>,
    /// Hex SHA-256 of the job's capsule.
    pub capsule_sha256: Option<Digest>,
    /// Name of its RayJob, once dispatched.
    pub rayjob_name: Option<String>,
    /// GPU series the job queues on (its primary pool's series), if known.
    pub queue_series: Option<String>,
    /// Where each pool runs, set when the job is dispatched.
    pub placement: Option<Placement>,
    /// Monotonic submission sequence (queue order and pagination key).
    pub seq: i64,
    /// Unix milliseconds of the submission.
    pub created_at_ms: i64,
    /// Unix milliseconds of the last change.
    pub updated_at_ms: i64,
    /// The W3C `traceparent` of the job's trace (its submission span), when the job is
    /// traced or its submitter sent one: the lifecycle's spans hang from it and the Ray
    /// containers get it as `TRACEPARENT` (`telemetry/job_trace.rs`).
    #[serde(skip)]
    pub trace_parent: Option<String>,
    /// The last checkpoint the job acknowledged (`POST …/checkpoints`), if any.
    pub last_checkpoint: Option<Checkpoint>,
    /// How many times it was preempted and released: its current attempt (0: the
    /// first run). Each attempt runs under a RayJob of its own.
    pub attempt: u32,
    /// What it was admitted on (priority after the policy's cap, preemptible), set
    /// with its dispatch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<AdmittedTerms>,
    /// The fleet (cluster) it was dispatched to, set with its dispatch intent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
}

/// A job to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Id from [`new_job_id`].
    pub id: String,
    /// Owning team (from authentication).
    pub team: String,
    /// The validated spec.
    pub spec: JobSpec,
    /// Initial state (usually `queued`; `rejected` for a recorded rejection).
    pub state: JobState,
    /// Initial reason.
    pub reason: Option<String>,
    /// Hex SHA-256 of the capsule.
    pub capsule_sha256: Option<Digest>,
    /// Series the job queues on.
    pub queue_series: Option<String>,
    /// The W3C `traceparent` of the job's trace, if any.
    pub trace_parent: Option<String>,
}

/// The leadership a write is made under: lease `lease` at epoch `epoch` (the lease's
/// monotonic fencing token, see [`super::CoordStore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease's name.
    pub lease: String,
    /// The epoch the writer holds it at.
    pub epoch: u64,
}

/// A compare-and-set state change.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The job.
    pub id: String,
    /// The state the caller believes the job is in.
    pub from: JobState,
    /// The new state.
    pub to: JobState,
    /// Why (replaces the job's reason).
    pub reason: Option<String>,
    /// Sets the RayJob name (on dispatch).
    pub rayjob_name: Option<String>,
    /// Sets the fleet the RayJob is created in (on dispatch).
    pub fleet: Option<String>,
    /// Sets the placement (on dispatch).
    pub placement: Option<Placement>,
    /// The admission decision behind this change, recorded in the same transaction.
    pub decision: Option<NewDecision>,
    /// Commit only while this leadership is current (the leader's controllers set it).
    pub fence: Option<Fence>,
    /// Sets the admitted terms (on dispatch).
    pub terms: Option<AdmittedTerms>,
    /// Opens or closes a preemption record, in the same transaction.
    pub preemption: Option<PreemptionWrite>,
}

impl Transition {
    /// A plain state change with a reason.
    pub fn new(id: &str, from: JobState, to: JobState, reason: Option<String>) -> Self {
        Self {
            id: id.to_string(),
            from,
            to,
            reason,
            rayjob_name: None,
            fleet: None,
            placement: None,
            decision: None,
            fence: None,
            terms: None,
            preemption: None,
        }
    }
}

/// A job's whole state history with what a chart of the cluster's last day needs
/// (its series and GPUs): see [`JobStore::lives_since`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobLife {
    pub id: String,
    /// The series it queues on, if known.
    pub series: Option<String>,
    /// GPUs its spec asks for.
    pub gpus: u32,
    pub created_at_ms: i64,
    /// Oldest first.
    pub history: Vec<HistoryEntry>,
}

/// One entry of a job's state history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Previous state (`None` for the submission).
    pub from: Option<JobState>,
    /// New state.
    pub to: JobState,
    /// Why.
    pub reason: Option<String>,
    /// Unix milliseconds.
    pub at_ms: i64,
}

/// An admission decision to record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewDecision {
    /// The job.
    pub job_id: String,
    /// The job's team.
    pub team: String,
    /// `admit`, `queue`, `reject` or `error`.
    pub kind: String,
    /// Stable code (hold / rejection code), if any.
    pub code: Option<String>,
    /// Human message, if any.
    pub message: Option<String>,
    /// Field the rejection is about, if any.
    pub field: Option<String>,
    /// Per-plugin trace / digests (JSON).
    pub plugins: serde_json::Value,
    /// Version of the policy that decided (`global@3`, `global@3+team@1`).
    pub chain_version: String,
    /// The policy request the chain saw (kept for replaying candidate chains; not
    /// part of API answers).
    #[serde(skip)]
    pub request: Option<serde_json::Value>,
}

/// A recorded admission decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// The decision.
    #[serde(flatten)]
    pub decision: NewDecision,
    /// Unix milliseconds.
    pub at_ms: i64,
}

/// A list query (keyset pagination, newest first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    /// Only this team's jobs (`None` = all teams; admins only).
    pub team: Option<String>,
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Page size (clamped to 1..=[`MAX_PAGE`]; 0 means 50).
    pub limit: u32,
    /// Cursor from the previous page's `next`.
    pub after: Option<String>,
}

/// One page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// The jobs, newest first.
    pub jobs: Vec<JobRecord>,
    /// Cursor of the next page, if there is one.
    pub next: Option<String>,
}

/// The durable job store.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Inserts a job, its first history entry and (optionally) the admission decision
    /// that let it in, in one transaction; returns after the commit is durable.
    async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError>;
    /// A job by id.
    async fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError>;
    /// Moves a job `from → to` if it is still in `from` (compare-and-set), and — when
    /// the transition carries a fence — only while the fence is current.
    async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError>;
    /// A page of jobs, newest first.
    async fn list(&self, q: ListQuery) -> Result<Page, StoreError>;
    /// Queued jobs in queue order (oldest first), optionally of one series.
    async fn queued(&self, series: Option<String>) -> Result<Vec<JobRecord>, StoreError>;
    /// How many jobs of `team` are queued (the per-team queue cap).
    async fn queued_count(&self, team: &str) -> Result<u64, StoreError>;
    /// Jobs that hold GPUs (dispatched, initializing, running).
    async fn active(&self) -> Result<Vec<JobRecord>, StoreError>;
    /// The id and state of every job that has not ended (queued or holding GPUs), in
    /// queue order: what the dispatcher lists each pass to read only the records that
    /// changed ([`JobStore::get_many`]).
    async fn unfinished(&self) -> Result<Vec<(String, JobState)>, StoreError>;
    /// A value that differs from the one read before whenever a job or a preemption
    /// may have been written since (other tables do not count), by this process or
    /// another one sharing the store; `None` when
    /// the backend cannot tell cheaply (callers then read again). Read it *before* the
    /// data it vouches for: a write between the two reads shows as a change next time.
    async fn change_version(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }
    /// The jobs of `ids` that exist (in no particular order).
    async fn get_many(&self, ids: Vec<String>) -> Result<Vec<JobRecord>, StoreError>;
    /// Records an admission decision.
    async fn record_decision(&self, d: NewDecision) -> Result<(), StoreError>;
    /// A job's decisions, oldest first.
    async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, StoreError>;
    /// A job's state history, oldest first.
    async fn history(&self, job_id: &str) -> Result<Vec<HistoryEntry>, StoreError>;
    /// The state histories of `ids` in one read (a page of the jobs list), each
    /// oldest first; a job without history (or unknown) is absent.
    async fn histories(
        &self,
        ids: Vec<String>,
    ) -> Result<BTreeMap<String, Vec<HistoryEntry>>, StoreError>;
    /// The jobs that held GPUs at or after `since_ms`: those that entered or left a
    /// GPU-holding state (dispatched, initializing, running, preempting) then, and
    /// those that hold GPUs now (one may have run through the whole window without a
    /// change). Newest first, at most `limit`, each with its whole history. A job
    /// that only waited is not one: a long queue costs nothing here.
    async fn lives_since(&self, since_ms: i64, limit: u32) -> Result<Vec<JobLife>, StoreError>;
    /// Records `step` as the job's last acknowledged checkpoint, at `at_ms`, if the job
    /// holds GPUs and acknowledged no later step ([`crate::store::checkpoints`]).
    async fn record_checkpoint(
        &self,
        job_id: &str,
        step: u64,
        at_ms: i64,
    ) -> Result<CheckpointOutcome, StoreError>;
    /// A job's preemptions, oldest first.
    async fn preemptions(&self, job_id: &str) -> Result<Vec<PreemptionRecord>, StoreError>;
    /// Every preemption noticed at or after `since_ms`, and every one whose notice
    /// still runs (the dispatcher's window and holds), oldest first.
    async fn preemptions_since(&self, since_ms: i64) -> Result<Vec<PreemptionRecord>, StoreError>;
    /// Adds an accrual's charges to the usage ledger (each row decayed to the
    /// accrual's time first) in one transaction, only while `fence` (the leader's
    /// term; `None`: unfenced) is current.
    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError>;
    /// The usage ledger: every team's decayed GPU-seconds per series, each as of
    /// its last write.
    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError>;
    /// Appends a pass to the dispatch journal and forgets the records from before
    /// `keep_since_ms`, in one transaction, only while `fence` is current.
    async fn record_pass(
        &self,
        p: PassRecord,
        keep_since_ms: i64,
        fence: Option<Fence>,
    ) -> Result<(), StoreError>;
    /// The dispatch journal's passes from `from_ms` to `to_ms` (both included),
    /// oldest first, at most `limit`.
    async fn passes(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<PassRecord>, StoreError>;
    /// A feed that changes when any replica queues a job (PostgreSQL's
    /// `LISTEN/NOTIFY`), so the leader's dispatcher wakes for another replica's
    /// submission; `None` when the backend has none (the dispatcher's tick covers it).
    fn queue_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// The stored job feed's changes after position `after`, oldest first (commit
    /// order), at most `limit` ([`super::job_feed`]).
    async fn changes_since(&self, after: i64, limit: u32) -> Result<Vec<StoredChange>, StoreError>;
    /// The stored job feed's newest position (0 when empty).
    async fn changes_head(&self) -> Result<i64, StoreError>;
    /// A feed that changes when any replica records a state change (PostgreSQL's
    /// `LISTEN/NOTIFY`); `None` when this process is the only writer (SQLite), whose
    /// job feed is fed in-process.
    fn state_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// Current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A new job id: 24 lowercase hex digits, the first 12 the submission time in
/// milliseconds (ids sort by time), the rest from a hash of the time, the process and
/// a counter (unique within a gateway). Always a valid label value and RayJob suffix.
pub fn new_job_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = Sha256::new();
    h.update(nanos.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(n.to_le_bytes());
    let tail = hex::encode(h.finalize());
    let millis = (nanos / 1_000_000) as u64 & 0xffff_ffff_ffff;
    format!("{millis:012x}{}", &tail[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_unique_sortable_label_values() {
        let ids: Vec<String> = (0..1000).map(|_| new_job_id()).collect();
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
        for id in &ids {
            assert_eq!(id.len(), 24);
            assert!(crate::jobspec::names::is_label_value(id));
        }
        assert!(ids[0][..12] <= ids[999][..12]);
    }
}
