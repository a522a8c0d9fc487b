//! Retention: how long Forge keeps what piles up, and the leader's sweeper that
//! deletes it when that time is over.
//!
//! | what | kept for | setting | after |
//! |---|---|---|---|
//! | a rejected submission (record, history, decision) | 30 days | `FORGE_RETENTION_REJECTED_S` | `GET /v1/jobs/{id}` is 404 |
//! | a job's archived logs (every pod's) | 30 days after the job ended | `FORGE_RETENTION_LOGS_S` | the job stays; its log routes answer 410 `logs-expired` |
//! | a team's right to a capsule | 14 days after its last upload or use | `FORGE_RETENTION_CAPSULES_S` | naming the digest is 404 `unknown-capsule`; bytes no team owns are deleted |
//!
//! `0` keeps that kind forever. A capsule a job that has not ended uses is never
//! forgotten or deleted, whatever its age. The sweep runs on the leader only, every
//! `FORGE_RETENTION_SWEEP_S`, in bounded steps that each check the leadership term;
//! it also measures what object storage holds (`forge_storage_bytes{kind}`,
//! `forge_storage_objects{kind}`) and counts what it deleted
//! (`forge_retention_deleted_total{kind}`) and its sweeps (`forge_retention_sweeps_total`).
//!
//! Capsule bytes are deleted in two steps the database orders: a claim (only while no
//! team owns the digest and no live job uses it), the delete, then "deleted". An upload
//! of the same bytes grants ownership in one step with that claim
//! ([`crate::store::CapsuleStore::grant_capsule`]); when it learns a deletion began it
//! waits for it to finish ([`deletion_over`]) and stores the bytes again, so a
//! deletion can never take bytes a team was just told it has. Objects written within
//! the last hour (an upload between its store and its grant) are never claimed.

mod sweep;

use std::sync::Arc;
use std::time::Duration;

use crate::config::GatewayConfig;
use crate::domain::Digest;
use crate::leader::Term;
use crate::metrics::Metrics;
use crate::objects::{ObjectStore, ObjectStoreError};
use crate::store::{CapsuleStore, Deletion, RetentionStore, StoreError};

pub use sweep::Swept;

/// Errors of a sweep; the next sweep starts over.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("object store: {0}")]
    Objects(#[from] ObjectStoreError),
    #[error(transparent)]
    Deposed(#[from] crate::leader::Deposed),
}

/// How long each kind is kept (`None`: forever) and how often the sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub rejected: Option<Duration>,
    pub logs: Option<Duration>,
    pub capsules: Option<Duration>,
    pub sweep: Duration,
}

impl Periods {
    /// The periods of the `FORGE_RETENTION_*` settings.
    pub fn from_config(gw: &GatewayConfig) -> Self {
        let keep = |s: u64| (s > 0).then(|| Duration::from_secs(s));
        Periods {
            rejected: keep(gw.retention_rejected_s),
            logs: keep(gw.retention_logs_s),
            capsules: keep(gw.retention_capsules_s),
            sweep: Duration::from_secs(gw.retention_sweep_s.max(1)),
        }
    }
}

/// The sweeper's parts.
#[derive(Clone)]
pub struct Retention {
    pub(crate) periods: Periods,
    pub(crate) store: Arc<dyn RetentionStore>,
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Retention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retention")
            .field("periods", &self.periods)
            .finish_non_exhaustive()
    }
}

impl Retention {
    /// The sweeper over these parts.
    pub fn new(
        periods: Periods,
        store: Arc<dyn RetentionStore>,
        objects: Arc<dyn ObjectStore>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Retention {
            periods,
            store,
            objects,
            metrics,
        }
    }
}

/// Starts the sweeper for `term`: a sweep at once, then one every period, until the
/// term ends.
pub fn spawn(retention: Retention, term: Term) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(retention.periods.sweep);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if term.check("retention sweep").is_err() {
                return;
            }
            match retention.sweep(&term).await {
                Ok(swept) => {
                    retention.metrics.retention_swept();
                    if swept.deleted_anything() {
                        tracing::info!(?swept, "retention sweep deleted what was past its time");
                    }
                }
                Err(RetentionError::Deposed(_)) => return,
                Err(e) => tracing::warn!(error = %e, "retention sweep failed (next sweep retries)"),
            }
        }
    })
}

/// Longest an upload waits for a deletion of its capsule's bytes to finish.
const DELETION_WAIT: Duration = Duration::from_secs(60);

/// After a grant that reported `seen`: whether the caller must store the bytes
/// again, having waited for a deletion in progress to finish (so storing them cannot
/// be undone by it). `put_file` uploads only when the bytes are absent, so storing
/// "again" costs one existence check when they survived.
pub async fn deletion_over(
    capsules: &dyn CapsuleStore,
    digest: &Digest,
    seen: Option<Deletion>,
) -> Result<bool, StoreError> {
    let Some(mut state) = seen else {
        return Ok(false);
    };
    let started = tokio::time::Instant::now();
    while state == Deletion::Deleting && started.elapsed() < DELETION_WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match capsules.capsule_deletion(digest).await? {
            Some(now) => state = now,
            None => break,
        }
    }
    if state == Deletion::Deleting {
        // A sweeper stopped between its claim and its delete: the next one finds the
        // claim stale, sees this owner and does not delete.
        tracing::warn!(capsule = %digest, "a capsule deletion did not finish in {DELETION_WAIT:?}: storing the bytes anyway");
    }
    Ok(true)
}
