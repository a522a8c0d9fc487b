//! The leader's side of a preemption once the dispatcher has recorded the notice
//! (`running → preempting`, see `dispatch/preempt.rs`): it stops the victim's Ray job
//! the way `ray job stop` does (SIGTERM, then SIGKILL after the job's grace:
//! [`crate::cluster::ray_stop`]), then releases it when the first of these happens:
//!
//! - its Ray job ends (it exited on the signal, or was killed): **exited**;
//! - it acknowledges a checkpoint after the notice: **checkpointed** — once it has
//!   had [`SETTLE_MS`] to exit by itself after that (its last lines reach its log,
//!   its cleanup runs), never past its grace;
//! - its grace ends: **grace-ended** (its RayJob is deleted under it);
//! - its RayJob is gone (deleted outside Forge, or by an interrupted release):
//!   **rayjob-gone**.
//!
//! A release archives the attempt's logs (`logs/<job>/attempts/<n>/`), deletes its
//! RayJob and queues the job again in one fenced transition (`preempting → queued`,
//! the attempt counter up, the preemption record closed with the work lost). The job
//! keeps its place (the queue is in submission order) and its next attempt gets
//! `FORGE_RESUME_STEP`. A job that succeeds during its notice simply succeeds.
//!
//! Every side effect is the leader's, checked against its term right before it (a
//! deposed leader's notices are carried out by its successor, whose loop finds the
//! open records in the store).

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;

use super::Lifecycle;
use crate::cluster::RayJob;
use crate::cluster::ray_stop::stop_ray_job;
use crate::domain::JobState;
use crate::jobs::error::JobError;
pub use crate::store::preemptions::ReleaseCause;
use crate::store::preemptions::{PreemptionRecord, PreemptionWrite, Release};
use crate::store::{JobRecord, StoreError, Transition, now_ms};

/// How long a job that acknowledged a checkpoint after its notice has to exit by
/// itself before it is released anyway.
pub const SETTLE_MS: i64 = 3_000;

/// How often the leader looks at the notices that run.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long a release that failed (its logs not archived, the API server not
/// answering) waits before it is tried again.
pub const RELEASE_RETRY: Duration = Duration::from_secs(5);

impl Lifecycle {
    /// Releases `job` (preempting) in the background, once per job at a time.
    pub(crate) fn start_release(&self, job: JobRecord, cause: ReleaseCause) {
        let this = self.clone();
        let key = format!("release/{}", job.id);
        self.cleanups.spawn_holding(key, async move {
            match this.release(&job, cause).await {
                Ok(()) => None,
                Err(e) => {
                    tracing::warn!(
                        job = %job.id,
                        retry_in_s = RELEASE_RETRY.as_secs(),
                        "releasing a preempted job failed; it keeps its RayJob until a retry succeeds: {e}"
                    );
                    Some(RELEASE_RETRY)
                }
            }
        });
    }

    /// A preempting job's RayJob reports `obj`'s status: a success ends the job, any
    /// other end releases it, anything else waits.
    pub(super) async fn on_preempted_rayjob(
        &self,
        job: JobRecord,
        obj: &RayJob,
    ) -> Result<(), JobError> {
        let status = obj.status_or_default();
        let (to, reason) = super::kuberay_status::target_state(&status);
        if to == JobState::Succeeded {
            let job = self.core.advance(job, JobState::Succeeded, reason).await?;
            if job.state.is_terminal() {
                self.start_cleanup(job, obj.clone());
            }
        } else if to.is_terminal() {
            self.start_release(job, ReleaseCause::Exited);
        }
        Ok(())
    }

    /// Archives the attempt's logs, deletes its RayJob and queues the job again.
    async fn release(&self, job: &JobRecord, cause: ReleaseCause) -> Result<(), JobError> {
        let open = self.open_notice(&job.id).await?;
        let cluster = self.of(job)?;
        if let Some(name) = job.rayjob_name.as_deref()
            && let Some(rayjob) = cluster.rayjobs.get(name).await?
            && rayjob.metadata.deletion_timestamp.is_none()
        {
            if !self.archive_logs(job, name, Some(job.attempt)).await {
                return Err(JobError::Invariant(format!(
                    "archiving attempt {} of job {} failed; RayJob {name} kept for a retry",
                    job.attempt, job.id
                )));
            }
            self.core.may_act("delete")?;
            self.core.metrics.rayjob_write("delete");
            cluster.rayjobs.delete(name).await?;
        }
        let released_ms = now_ms();
        let reason = format!(
            "preemption.released ({}): preempted by job {}; queued again to resume from its last acknowledged checkpoint",
            cause.as_str(),
            open.as_ref().map_or("?", |p| p.by_job.as_str()),
        );
        let mut t = Transition::new(
            &job.id,
            JobState::Preempting,
            JobState::Queued,
            Some(reason),
        );
        t.preemption = Some(PreemptionWrite::Release(Release {
            released_ms,
            measured: true,
            released_by: Some(cause),
        }));
        match self.core.transition(t).await {
            Ok(_) => {
                let lost = self.measured_loss(&job.id, job.attempt).await;
                self.core.metrics.preemption_released(cause.as_str(), lost);
                tracing::info!(job = %job.id, how = cause.as_str(), lost_gpu_seconds = lost, "preempted job released");
                Ok(())
            }
            // It ended meanwhile (a cancel), or another release won.
            Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The work the release of `attempt` lost, as the store measured it when the
    /// release committed (0 if it cannot be read now: the metric misses it, the
    /// record keeps it).
    async fn measured_loss(&self, id: &str, attempt: u32) -> f64 {
        match self.core.store.preemptions(id).await {
            Ok(records) => records
                .iter()
                .rfind(|p| p.attempt == attempt)
                .and_then(|p| p.lost_gpu_seconds)
                .unwrap_or(0.0),
            Err(e) => {
                tracing::warn!(job = %id, "reading the released preemption's loss: {e}");
                0.0
            }
        }
    }

    /// The job's preemption whose notice runs.
    async fn open_notice(&self, id: &str) -> Result<Option<PreemptionRecord>, JobError> {
        Ok(self
            .core
            .store
            .preemptions(id)
            .await?
            .into_iter()
            .rfind(|p| p.released_ms.is_none()))
    }

    /// One look at the notices that run: stop each victim once (this term), release
    /// the ones whose grace ended or that acknowledged a checkpoint since.
    async fn look_at_notices(&self, stopped: &mut BTreeSet<(String, u32)>) -> Result<(), JobError> {
        let open = self.core.store.preemptions_since(i64::MAX).await?;
        let now = now_ms();
        stopped.retain(|k| open.iter().any(|p| p.job_id == k.0 && p.attempt == k.1));
        for notice in open {
            let Some(job) = self.core.store.get(&notice.job_id).await? else {
                continue;
            };
            if job.state != JobState::Preempting || job.attempt != notice.attempt {
                continue;
            }
            if now >= notice.deadline_ms() {
                self.start_release(job, ReleaseCause::GraceEnded);
            } else if job
                .last_checkpoint
                .is_some_and(|c| c.at_ms >= notice.at_ms && now >= c.at_ms + SETTLE_MS)
            {
                self.start_release(job, ReleaseCause::Checkpointed);
            } else if stopped.insert((job.id.clone(), job.attempt)) {
                self.start_stop(job);
            }
        }
        Ok(())
    }

    /// Sends the victim its SIGTERM (`ray job stop`) in the background. A stop that
    /// does not reach it (no head, the dashboard down) is logged: the grace still
    /// ends, and the release then deletes its RayJob.
    fn start_stop(&self, job: JobRecord) {
        let this = self.clone();
        tokio::spawn(async move {
            let Some(name) = job.rayjob_name.as_deref() else {
                return;
            };
            let result = async {
                let cluster = this.of(&job)?;
                let Some(rayjob) = cluster.rayjobs.get(name).await? else {
                    return Ok(());
                };
                this.core.may_act("stop")?;
                stop_ray_job(cluster, &rayjob).await.map_err(|e| {
                    JobError::Invariant(format!("stopping {}: {e}", rayjob.name_any()))
                })
            }
            .await;
            match result {
                Ok(()) => {
                    tracing::info!(job = %job.id, rayjob = name, "preemption notice sent (ray job stop)")
                }
                Err(e) => {
                    tracing::warn!(job = %job.id, "the preemption notice did not reach the job; its grace still ends: {e}")
                }
            }
        });
    }
}

/// Runs the leader's look at the notices until the task is aborted.
pub fn spawn(jobs: Lifecycle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stopped = BTreeSet::new();
        loop {
            if let Err(e) = jobs.look_at_notices(&mut stopped).await {
                tracing::warn!("looking at preemption notices: {e}");
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    })
}
