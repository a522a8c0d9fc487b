//! [`Metered`]: a [`JobStore`] that times every operation of the one it wraps and
//! counts the ones the database failed (`forge_store_operation_seconds{op}`,
//! `forge_store_errors_total{op}`). A conflict, a fenced write or a duplicate is an
//! answer, not a failure; a lost connection, a dropped batch or a corrupt row is.
//! The composition root wraps the backend's job store once (`compose.rs`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::dispatch_journal::PassRecord;
use super::usage::{Accrual, UsageRecord};
use super::{
    CheckpointOutcome, DecisionRecord, Fence, HistoryEntry, JobLife, JobRecord, JobStore,
    ListQuery, NewDecision, NewJob, Page, PreemptionRecord, StoreError, StoredChange, Transition,
};
use crate::domain::JobState;
use crate::metrics::{Metrics, StoreOp};

/// The wrapped store and where its figures go.
pub struct Metered {
    inner: Arc<dyn JobStore>,
    metrics: Arc<Metrics>,
}

impl Metered {
    /// `inner`, timed into `metrics`.
    pub fn wrap(inner: Arc<dyn JobStore>, metrics: Arc<Metrics>) -> Arc<dyn JobStore> {
        Arc::new(Metered { inner, metrics })
    }

    async fn timed<T>(
        &self,
        op: StoreOp,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = call.await;
        let failed = matches!(
            result,
            Err(StoreError::Backend(_)
                | StoreError::Unavailable(_)
                | StoreError::NotCommitted(_)
                | StoreError::Corrupt(_)
                | StoreError::Task(_))
        );
        self.metrics
            .store_operation(op.as_str(), started.elapsed(), failed);
        result
    }
}

#[async_trait]
impl JobStore for Metered {
    async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError> {
        self.timed(StoreOp::Insert, self.inner.insert(job, decision))
            .await
    }
    async fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        self.timed(StoreOp::Get, self.inner.get(id)).await
    }
    async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError> {
        self.timed(StoreOp::Transition, self.inner.transition(t))
            .await
    }
    async fn list(&self, q: ListQuery) -> Result<Page, StoreError> {
        self.timed(StoreOp::List, self.inner.list(q)).await
    }
    async fn queued(&self, series: Option<String>) -> Result<Vec<JobRecord>, StoreError> {
        self.timed(StoreOp::Queued, self.inner.queued(series)).await
    }
    async fn queued_count(&self, team: &str) -> Result<u64, StoreError> {
        self.timed(StoreOp::QueuedCount, self.inner.queued_count(team))
            .await
    }
    async fn active(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.timed(StoreOp::Active, self.inner.active()).await
    }
    async fn unfinished(&self) -> Result<Vec<(String, JobState)>, StoreError> {
        self.timed(StoreOp::Unfinished, self.inner.unfinished())
            .await
    }
    async fn change_version(&self) -> Result<Option<u64>, StoreError> {
        self.timed(StoreOp::ChangeVersion, self.inner.change_version())
            .await
    }
    async fn get_many(&self, ids: Vec<String>) -> Result<Vec<JobRecord>, StoreError> {
        self.timed(StoreOp::GetMany, self.inner.get_many(ids)).await
    }
    async fn record_decision(&self, d: NewDecision) -> Result<(), StoreError> {
        self.timed(StoreOp::RecordDecision, self.inner.record_decision(d))
            .await
    }
    async fn record_checkpoint(
        &self,
        job_id: &str,
        step: u64,
        at_ms: i64,
    ) -> Result<CheckpointOutcome, StoreError> {
        let write = self.inner.record_checkpoint(job_id, step, at_ms);
        self.timed(StoreOp::RecordCheckpoint, write).await
    }
    async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, StoreError> {
        self.timed(StoreOp::Decisions, self.inner.decisions(job_id))
            .await
    }
    async fn history(&self, job_id: &str) -> Result<Vec<HistoryEntry>, StoreError> {
        self.timed(StoreOp::History, self.inner.history(job_id))
            .await
    }
    async fn histories(
        &self,
        ids: Vec<String>,
    ) -> Result<BTreeMap<String, Vec<HistoryEntry>>, StoreError> {
        self.timed(StoreOp::Histories, self.inner.histories(ids))
            .await
    }
    async fn lives_since(&self, since_ms: i64, limit: u32) -> Result<Vec<JobLife>, StoreError> {
        self.timed(StoreOp::LivesSince, self.inner.lives_since(since_ms, limit))
            .await
    }
    async fn preemptions(&self, job_id: &str) -> Result<Vec<PreemptionRecord>, StoreError> {
        self.timed(StoreOp::Preemptions, self.inner.preemptions(job_id))
            .await
    }
    async fn preemptions_since(&self, since_ms: i64) -> Result<Vec<PreemptionRecord>, StoreError> {
        let read = self.inner.preemptions_since(since_ms);
        self.timed(StoreOp::PreemptionsSince, read).await
    }
    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError> {
        self.timed(StoreOp::AccrueUsage, self.inner.accrue_usage(a, fence))
            .await
    }
    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError> {
        self.timed(StoreOp::Usage, self.inner.usage()).await
    }
    async fn record_pass(
        &self,
        p: PassRecord,
        keep_since_ms: i64,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        self.timed(
            StoreOp::RecordPass,
            self.inner.record_pass(p, keep_since_ms, fence),
        )
        .await
    }
    async fn passes(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<PassRecord>, StoreError> {
        self.timed(StoreOp::Passes, self.inner.passes(from_ms, to_ms, limit))
            .await
    }
    fn queue_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.queue_changes()
    }
    async fn changes_since(&self, after: i64, limit: u32) -> Result<Vec<StoredChange>, StoreError> {
        self.timed(
            StoreOp::ChangesSince,
            self.inner.changes_since(after, limit),
        )
        .await
    }
    async fn changes_head(&self) -> Result<i64, StoreError> {
        self.timed(StoreOp::ChangesHead, self.inner.changes_head())
            .await
    }
    fn state_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.state_changes()
    }
}
