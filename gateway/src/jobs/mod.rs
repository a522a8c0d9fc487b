//! Jobs: submission, the gang-aware queue and dispatcher, the RayJob lifecycle, and
//! cancellation. HTTP handlers are in [`routes`]; everything else is callable from
//! tests without HTTP.

pub mod cleanup;
pub mod dispatch;
pub mod error;
pub mod events;
pub mod fit;
pub mod lifecycle;
pub mod queue;
pub mod routes;
pub mod submit;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

pub use error::JobError;
pub use queue::{QueueBoard, QueueEntry};
pub use submit::{CodeInput, Submitted, submit};

use crate::app::AppState;
use crate::auth::Caller;
use crate::store::{JobRecord, JobState, Transition};

/// The RayJob resource (`ray.io/v1`, `rayjobs`).
pub fn rayjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

/// RayJobs in the gateway's namespace.
pub fn rayjob_api(state: &AppState) -> Api<DynamicObject> {
    Api::namespaced_with(
        state.kube.clone(),
        &state.config.k8s.namespace,
        &rayjob_resource(),
    )
}

/// A job the caller may see (another team's job is reported as not found, so ids of
/// other teams cannot be probed).
pub async fn visible(state: &AppState, caller: &Caller, id: &str) -> Result<JobRecord, JobError> {
    match state.store.get(id).await? {
        Some(job) if caller.can_access(&job.team) => Ok(job),
        _ => Err(JobError::NotFound(id.to_string())),
    }
}

/// Cancel a job: a queued job leaves the queue; a dispatched one is marked cancelled
/// first (so a late status cannot resurrect it), then its RayJob is deleted after
/// archiving what logs exist.
pub async fn cancel(state: &AppState, caller: &Caller, id: &str) -> Result<JobRecord, JobError> {
    let mut job = visible(state, caller, id).await?;
    let reason = format!(
        "cancelled by {}",
        caller.name.clone().unwrap_or_else(|| caller.team.clone())
    );
    for _ in 0..3 {
        if job.state.is_terminal() {
            return Err(JobError::NotCancellable {
                id: job.id,
                state: job.state,
            });
        }
        let t = Transition::new(
            &job.id,
            job.state,
            JobState::Cancelled,
            Some(reason.clone()),
        );
        match state.store.transition(t).await {
            Ok(cancelled) => {
                state.metrics.transition(JobState::Cancelled);
                // Archive what logs exist, then delete the RayJob. If either fails the
                // job stays cancelled and the RayJob is kept: the lifecycle controller's
                // resync retries archive-then-delete for terminal jobs.
                if let Some(name) = &cancelled.rayjob_name {
                    let cleaned = match rayjob_api(state).get_opt(name).await {
                        Ok(Some(obj)) => {
                            lifecycle::archive_then_delete(state, &cancelled, &obj).await
                        }
                        Ok(None) => Ok(()),
                        Err(e) => Err(e.into()),
                    };
                    if let Err(e) = cleaned {
                        tracing::warn!(job = %cancelled.id, "cancel cleanup deferred: {e}");
                    }
                }
                state.queue.wake();
                return Ok(cancelled);
            }
            Err(crate::store::StoreError::Conflict { .. }) => {
                job = visible(state, caller, id).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(JobError::Io(format!("job {id} kept changing; try again")))
}
