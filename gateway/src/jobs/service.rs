//! [`Jobs`]: the one owner of job state. Every state change goes through
//! [`Jobs::transition`] (one compare-and-set) or [`Jobs::advance`] (re-reading on a
//! lost compare-and-set), which apply the same side effects everywhere: the transition
//! metric, a dispatcher wake-up whenever the change can let another job run (a job ends
//! or re-enters the queue), and the event on the job feed (`feed.rs`). The operations
//! on jobs — submit, dispatch, cancel, lifecycle, clean-up, logs, diagnosis — are
//! `impl Jobs` blocks in their own files.
//!
//! The leader's controllers run on a copy bound to their leadership term
//! ([`Jobs::for_term`]): every transition they make is fenced with the term's epoch,
//! and every RayJob create or delete they decide asks [`Jobs::may_act`] first. API
//! requests (any replica) run unbound.

use std::sync::Arc;

use crate::admission::Admission;
use crate::auth::Caller;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::domain::JobState;
use crate::leader::Term;
use crate::metrics::Metrics;
use crate::objects::ObjectStore;
use crate::store::{
    CapsuleStore, JobRecord, JobStore, NewDecision, NewJob, StoreError, Transition,
};

use super::error::JobError;
use super::feed::{JobEvent, JobFeed};
use super::inflight::InFlight;
use super::limits::SubmissionLimits;
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
    pub(crate) feed: JobFeed,
    /// The leadership term the controllers act under (`None`: an API request).
    pub(crate) term: Option<Term>,
    /// Foreign RayJobs already reported (each is logged once; see `orphans.rs`).
    pub(crate) reported_orphans: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// Per-team submission rate and queue cap (`limits.rs`).
    pub(crate) limits: Arc<SubmissionLimits>,
    /// Capsule links for `working_dir` (`capsule_links.rs`), when the gateway knows
    /// the URL pods reach it at; otherwise pods get the object store's URL.
    pub(crate) links: Option<Arc<super::capsule_links::CapsuleLinks>>,
    /// The dispatcher's remembered decisions (`decision_memo.rs`).
    pub(crate) decisions: Arc<super::decision_memo::DecisionMemo>,
    /// The dispatcher's copy of unfinished jobs' records (`records.rs`).
    pub(crate) records: Arc<super::records::RecordCache>,
    /// Dispatches whose RayJob create is in flight here (`claims.rs`).
    pub(crate) creating: Arc<super::claims::Claims>,
    /// Archive-then-delete of one job runs once at a time in this process (a cancel
    /// and the lifecycle controller's clean-up may ask at the same moment), by stripe
    /// of the job id.
    pub(crate) archiving: Arc<Vec<tokio::sync::Mutex<()>>>,
}

/// Stripes of [`Jobs::archiving`].
const ARCHIVE_STRIPES: usize = 64;

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
        let limits = Arc::new(SubmissionLimits::new(
            config.gateway.submissions_per_minute,
            config.gateway.max_queued_per_team,
        ));
        Jobs {
            limits,
            config,
            store,
            capsules,
            metrics,
            queue,
            admission,
            cluster,
            objects,
            cleanups: InFlight::new(CLEANUP_PARALLEL),
            feed: JobFeed::default(),
            term: None,
            reported_orphans: Arc::default(),
            links: None,
            decisions: Arc::default(),
            records: Arc::default(),
            creating: Arc::default(),
            archiving: Arc::new(
                (0..ARCHIVE_STRIPES)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
            ),
        }
    }

    /// The same, handing pods capsule links under `links` (see `capsule_links.rs`).
    pub fn with_capsule_links(self, links: super::capsule_links::CapsuleLinks) -> Jobs {
        Jobs {
            links: Some(Arc::new(links)),
            ..self
        }
    }

    /// A copy whose writes are fenced with `term` and whose RayJob creates and deletes
    /// stop once it is over (the leader's controllers).
    pub fn for_term(&self, term: Term) -> Jobs {
        Jobs {
            term: Some(term),
            ..self.clone()
        }
    }

    /// Whether a RayJob create or delete may go out now: always for an API request;
    /// for the controllers, only while their term is current.
    pub(crate) fn may_act(&self, action: &'static str) -> Result<(), JobError> {
        match &self.term {
            Some(term) => Ok(term.check(action)?),
            None => Ok(()),
        }
    }

    /// The store (reads: lists, history, decisions).
    pub fn store(&self) -> &dyn JobStore {
        self.store.as_ref()
    }

    /// The feed of job changes (`feed.rs`).
    pub fn feed(&self) -> &JobFeed {
        &self.feed
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
        self.feed.publish(JobEvent::State {
            job_id: record.id.clone(),
            team: record.team.clone(),
            from: None,
            to: record.state,
            reason: record.reason.clone(),
            at_ms: record.updated_at_ms,
        });
        Ok(record)
    }

    /// One compare-and-set transition with its side effects (fenced with the term,
    /// if any).
    pub(crate) async fn transition(&self, mut t: Transition) -> Result<JobRecord, StoreError> {
        let (from, to) = (t.from, t.to);
        if let Some(term) = &self.term {
            t.fence = Some(term.fence());
        }
        let job = match self.store.transition(t).await {
            Err(e @ StoreError::Fenced { .. }) => {
                if let Some(term) = &self.term {
                    term.refused("transition");
                }
                return Err(e);
            }
            other => other?,
        };
        self.metrics.transition(to);
        if to == JobState::Queued || to.is_terminal() {
            self.queue.wake();
        }
        self.feed.publish(JobEvent::State {
            job_id: job.id.clone(),
            team: job.team.clone(),
            from: Some(from),
            to,
            reason: job.reason.clone(),
            at_ms: job.updated_at_ms,
        });
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
        Err(JobError::Invariant(format!(
            "job {} kept changing; try again",
            job.id
        )))
    }
}
