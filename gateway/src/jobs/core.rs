//! [`JobCore`]: the one owner of job state, which every job service holds. Every state
//! change goes through [`JobCore::transition`] (one compare-and-set) or
//! [`JobCore::advance`] (re-reading on a lost compare-and-set), which apply the same
//! side effects everywhere: the transition metric, a dispatcher wake-up whenever the
//! change can let another job run (a job ends or re-enters the queue), and the event on
//! the job feed (`feed.rs`). New jobs come in through [`JobCore::insert`].
//!
//! The leader's controllers run on a core bound to their leadership term
//! ([`JobCore::for_term`]): every transition they make is fenced with the term's epoch,
//! and every RayJob create or delete they decide asks [`JobCore::may_act`] first. API
//! requests (any replica) run unbound.

use std::sync::Arc;

use crate::auth::Caller;
use crate::config::Config;
use crate::domain::JobState;
use crate::leader::Term;
use crate::metrics::Metrics;
use crate::store::{JobRecord, JobStore, NewDecision, NewJob, StoreError, Transition};

use super::error::JobError;
use super::feed::{JobEvent, JobFeed};
use super::queue::QueueBoard;

/// Attempts of a transition that keeps losing its compare-and-set.
const CAS_ATTEMPTS: usize = 3;

/// The store handle, the feed and the queue board's wake-up, with the term (if any)
/// that fences the writes. Cheap to clone: every part is shared.
#[derive(Clone)]
pub struct JobCore {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn JobStore>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) queue: Arc<QueueBoard>,
    pub(crate) feed: JobFeed,
    /// The leadership term the controllers act under (`None`: an API request).
    pub(crate) term: Option<Term>,
}

impl std::fmt::Debug for JobCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobCore")
    }
}

impl JobCore {
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn JobStore>,
        feed: JobFeed,
        metrics: Arc<Metrics>,
        queue: Arc<QueueBoard>,
    ) -> Self {
        JobCore {
            feed,
            config,
            store,
            metrics,
            queue,
            term: None,
        }
    }

    /// A copy whose writes are fenced with `term` and whose RayJob creates and deletes
    /// stop once it is over (the leader's controllers).
    pub fn for_term(&self, term: Term) -> JobCore {
        JobCore {
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
        self.phase_ended(from, &job);
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
        job: JobRecord,
        to: JobState,
        reason: String,
    ) -> Result<JobRecord, JobError> {
        self.advance_while(job, to, reason, |_| true).await
    }

    /// [`Core::advance`] that also stops when the job, re-read after another writer
    /// moved it, is no longer one `still` accepts (e.g. a RayJob's status is news
    /// only while the job runs on that RayJob: not once it was preempted and queued).
    pub(crate) async fn advance_while(
        &self,
        mut job: JobRecord,
        to: JobState,
        reason: String,
        still: impl Fn(&JobRecord) -> bool,
    ) -> Result<JobRecord, JobError> {
        for _ in 0..CAS_ATTEMPTS {
            if job.state == to
                || job.state.is_terminal()
                || !job.state.can_transition_to(to)
                || !still(&job)
            {
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
