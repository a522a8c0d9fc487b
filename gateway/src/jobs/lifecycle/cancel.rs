//! Cancelling a job: a queued job leaves the queue; a dispatched one is marked
//! cancelled first (so a late status cannot resurrect it), then its logs are archived
//! and its RayJob deleted. If that clean-up fails the job stays cancelled and the
//! RayJob is kept: the lifecycle controller's resync retries archive-then-delete.

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
            let cleaned = match self.cluster.rayjobs.get(name).await {
                Ok(Some(rayjob)) if self.cluster.rayjobs.is_own(&rayjob) => {
                    self.archive_then_delete(&cancelled, &rayjob).await
                }
                Ok(Some(_)) => {
                    tracing::warn!(job = %cancelled.id, rayjob = %name, "the RayJob belongs to another installation: not deleted");
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = cleaned {
                tracing::warn!(job = %cancelled.id, "cancel cleanup deferred: {e}");
            }
        }
        Ok(cancelled)
    }
}
