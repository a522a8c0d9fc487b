//! Cancelling a job: a queued job leaves the queue; a dispatched one is marked
//! cancelled first (so a late status cannot resurrect it), then, in the background,
//! its Ray job is stopped (`ray job stop`: SIGTERM, SIGKILL after its grace) and
//! waited for, its logs are archived — with the job's last lines — and its RayJob
//! deleted (`stop_first.rs`, `cleanup.rs`). The answer does not wait for that: the job
//! is cancelled once it is recorded so, and a follower of its log gets the rest. If
//! the clean-up fails the job stays cancelled and the RayJob is kept: the lifecycle
//! controller's resync retries it.

use super::Lifecycle;
use crate::auth::Caller;
use crate::domain::JobState;
use crate::jobs::error::JobError;
use crate::store::JobRecord;

impl Lifecycle {
    /// Cancels job `id` for `caller`.
    pub async fn cancel(&self, caller: &Caller, id: &str) -> Result<JobRecord, JobError> {
        let job = self.core.visible(caller, id).await?;
        if job.state.is_terminal() {
            return Err(JobError::NotCancellable {
                id: job.id,
                state: job.state,
            });
        }
        let reason = format!(
            "cancelled by {}",
            caller.name.clone().unwrap_or_else(|| caller.team.clone())
        );
        let cancelled = self.core.advance(job, JobState::Cancelled, reason).await?;
        if cancelled.state != JobState::Cancelled {
            // It ended another way while we tried.
            return Err(JobError::NotCancellable {
                id: cancelled.id,
                state: cancelled.state,
            });
        }
        if let Some(name) = &cancelled.rayjob_name {
            let cluster = self.of(&cancelled)?;
            match cluster.rayjobs.get(name).await {
                Ok(Some(rayjob)) if cluster.rayjobs.is_own(&rayjob) => {
                    self.start_cleanup(cancelled.clone(), rayjob);
                }
                Ok(Some(_)) => {
                    tracing::warn!(job = %cancelled.id, rayjob = %name, "the RayJob belongs to another installation: not deleted");
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(job = %cancelled.id, "cancel clean-up deferred to the resync: {e}")
                }
            }
        }
        Ok(cancelled)
    }
}
