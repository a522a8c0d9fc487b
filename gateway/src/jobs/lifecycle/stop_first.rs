//! Before a job's logs are archived, its Ray job is over. A job can end in the store
//! while its Ray job still runs — a user's cancel, a deadline the gateway enforced —
//! and deleting the RayJob then makes KubeRay stop it (`../shared/kuberay/SEMANTICS.md`,
//! deletion of the RayJob), whose last lines (the driver's clean-up, the submitter's
//! `Job '…' was stopped`) would be written after the archive was taken: a live follower
//! saw them, the archive never had them.
//!
//! So the clean-up first stops the Ray job the way `ray job stop` does (SIGTERM, then
//! SIGKILL after the job's checkpoint grace: [`crate::cluster::ray_stop`]) and waits
//! until the RayJob reports the Ray job ended — at most that grace plus
//! [`STOP_MARGIN`] — then archives and deletes. A stop that fails for a moment (a
//! 5xx, no answer) is sent again within that wait; one that cannot be sent (never
//! submitted, no head, the dashboard refusing) is not waited for: the archive is
//! taken as before and KubeRay's finalizer still stops what runs.

use std::time::Duration;

use kube::ResourceExt;

use super::Lifecycle;
use crate::cluster::ray_stop::stop_ray_job;
use crate::cluster::{RayJob, RayJobStatus};
use crate::store::JobRecord;

/// How long past the job's grace (Ray's supervisor kills it then) the clean-up still
/// waits for the RayJob to report its end: the operator reads the dashboard every few
/// seconds.
pub const STOP_MARGIN: Duration = Duration::from_secs(15);

/// How often the RayJob is read while its Ray job is being stopped.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Whether the Ray job behind a RayJob status has ended (Ray's terminal job
/// statuses), or never had a job to end.
pub fn ray_job_over(status: &RayJobStatus) -> bool {
    status.job_id.as_deref().is_none_or(str::is_empty)
        || matches!(
            status.job_status.as_deref(),
            Some("SUCCEEDED" | "FAILED" | "STOPPED")
        )
}

/// The longest a stopped Ray job of `job` is waited for.
pub fn stop_wait(job: &JobRecord) -> Duration {
    let grace = job.spec.deadlines.checkpoint_grace_s();
    Duration::from_secs(u64::try_from(grace).unwrap_or(0)) + STOP_MARGIN
}

impl Lifecycle {
    /// Stops `rayjob`'s Ray job if it still runs and waits (bounded) until it ended.
    pub(super) async fn stop_first(&self, job: &JobRecord, rayjob: &RayJob) {
        if rayjob.metadata.deletion_timestamp.is_some() || ray_job_over(&rayjob.status_or_default())
        {
            return;
        }
        if self.core.may_act("stop").is_err() {
            return; // no longer the leader: its successor cleans up
        }
        let name = rayjob.name_any();
        let Ok(cluster) = self.of(job) else {
            return; // its fleet is no longer configured: nothing to stop there
        };
        let until = tokio::time::Instant::now() + stop_wait(job);
        // A stop that failed for a moment (the API server or the dashboard busy) is
        // sent again within the wait: deleting the RayJob instead kills the driver
        // with no end line in its log.
        loop {
            match stop_ray_job(cluster, rayjob).await {
                Ok(()) => break,
                Err(e) if e.is_transient() && tokio::time::Instant::now() < until => {
                    tracing::debug!(job = %job.id, rayjob = %name, "stopping the Ray job failed ({e}); again");
                    tokio::time::sleep(LOOK_EVERY).await;
                }
                Err(e) => {
                    tracing::info!(job = %job.id, rayjob = %name, "the Ray job was not stopped before archiving ({e}); deleting the RayJob stops it");
                    return;
                }
            }
        }
        tracing::info!(job = %job.id, rayjob = %name, "Ray job stopped (ray job stop); archiving once it ended");
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            match cluster.rayjobs.get(&name).await {
                Ok(Some(now))
                    if now.metadata.deletion_timestamp.is_none()
                        && !ray_job_over(&now.status_or_default()) => {}
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(job = %job.id, rayjob = %name, "reading the stopped RayJob: {e}");
                    return;
                }
            }
            if tokio::time::Instant::now() >= until {
                tracing::warn!(job = %job.id, rayjob = %name, waited_s = stop_wait(job).as_secs(), "the stopped Ray job did not report its end; archiving anyway");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(v: serde_json::Value) -> RayJobStatus {
        serde_json::from_value(v).expect("status")
    }

    #[test]
    fn a_ray_job_is_over_when_ray_says_so_or_was_never_submitted() {
        assert!(ray_job_over(&status(json!({}))));
        assert!(ray_job_over(&status(json!({"jobId": ""}))));
        for s in ["SUCCEEDED", "FAILED", "STOPPED"] {
            assert!(
                ray_job_over(&status(json!({"jobId": "j", "jobStatus": s}))),
                "{s}"
            );
        }
        for s in ["PENDING", "RUNNING"] {
            assert!(
                !ray_job_over(&status(json!({"jobId": "j", "jobStatus": s}))),
                "{s}"
            );
        }
        assert!(!ray_job_over(&status(json!({"jobId": "j"}))));
    }
}
