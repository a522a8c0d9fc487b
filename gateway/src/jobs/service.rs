//! [`Jobs`]: the one owner of job state. Every state change goes through
//! [`Jobs::transition`] (one compare-and-set) or [`Jobs::advance`] (re-reading on a
//! lost compare-and-set), which apply the same side effects everywhere: the transition
//! metric, and a dispatcher wake-up whenever the change can let another job run (a job
//! ends or re-enters the queue). The operations on jobs — submit, dispatch, cancel,
//! lifecycle, clean-up, logs, diagnosis — are `impl Jobs` blocks in their own files.

use std::sync::Arc;

use crate::admission::Admission;
use crate::auth::Caller;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::domain::JobState;
use crate::metrics::Metrics;
use crate::objects::ObjectStore;
use crate::store::{
    CapsuleStore, JobRecord, JobStore, NewDecision, NewJob, StoreError, Transition,
};

use super::error::JobError;
use super::inflight::InFlight;
use super::queue::QueueBoard;

/// Clean-ups (archive logs, delete the RayJob) that may run at once.
const CLEANUP_PARALLEL: usize = 16;
/// Attempts of a transition that keeps losing its compare-and-set.
const CAS_ATTEMPTS: usize = 3;

/// The job domain and everything it acts on.
#[derive(Clone)]
pub struct Jobs {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) capsules: Arc<dyn CapsuleStore>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) queue: Arc<QueueBoard>,
    pub(crate) admission: Admission,
    pub(crate) cluster: Cluster,
    pub(crate) objects: Arc<dyn ObjectStore>,
    pub(crate) cleanups: Arc<InFlight>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jobs")
    }
}

impl Jobs {
    /// The job domain over these parts.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn JobStore>,
        capsules: Arc<dyn CapsuleStore>,
        metrics: Arc<Metrics>,
        queue: Arc<QueueBoard>,
        admission: Admission,
        cluster: Cluster,
        objects: Arc<dyn ObjectStore>,
    ) -> Self {
        Jobs {
            config,
            store,
            capsules,
            metrics,
            queue,
            admission,
            cluster,
            objects,
            cleanups: InFlight::new(CLEANUP_PARALLEL),
        }
    }

    /// The store (reads: lists, history, decisions).
    pub fn store(&self) -> &dyn JobStore {
        self.store.as_ref()
    }

    /// The dispatcher's published queue view.
    pub fn queue(&self) -> &Arc<QueueBoard> {
        &self.queue
    }

    /// The cluster adapter.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// A job the caller may see (another team's job is reported as not found, so ids
    /// of other teams cannot be probed).
    pub async fn visible(&self, caller: &Caller, id: &str) -> Result<JobRecord, JobError> {
        match self.store.get(id).await? {
            Some(job) if caller.can_access(&job.team) => Ok(job),
            _ => Err(JobError::NotFound(id.to_string())),
        }
    }

    /// Inserts a new job (and the decision that let it in) durably; a queued job
    /// wakes the dispatcher.
    pub(crate) async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError> {
        let record = self.store.insert(job, decision).await?;
        if record.state == JobState::Queued {
            self.queue.wake();
        }
        Ok(record)
    }

    /// One compare-and-set transition with its side effects.
    pub(crate) async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError> {
        let to = t.to;
        let job = self.store.transition(t).await?;
        self.metrics.transition(to);
        if to == JobState::Queued || to.is_terminal() {
            self.queue.wake();
        }
        Ok(job)
    }

    /// Moves `job` towards `to`, re-reading it when another writer moved it first.
    /// Stops (without error) when the job is already there, has ended, or can no
    /// longer make that move. Returns the job as it ends up.
    pub(crate) async fn advance(
        &self,
        mut job: JobRecord,
        to: JobState,
        reason: String,
    ) -> Result<JobRecord, JobError> {
        for _ in 0..CAS_ATTEMPTS {
            if job.state == to || job.state.is_terminal() || !job.state.can_transition_to(to) {
                return Ok(job);
            }
            let t = Transition::new(&job.id, job.state, to, Some(reason.clone()));
            match self.transition(t).await {
                Ok(j) => return Ok(j),
                Err(StoreError::Conflict { .. }) => {
                    job = self
                        .store
                        .get(&job.id)
                        .await?
                        .ok_or_else(|| JobError::NotFound(job.id.clone()))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(JobError::Io(format!(
            "job {} kept changing; try again",
            job.id
        )))
    }
}
