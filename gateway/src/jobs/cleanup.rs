//! Archive-then-delete, the one way a finished job's RayJob goes away: its logs (the
//! driver's and the head's) are archived to object storage beside the capsule, then
//! the RayJob is deleted, then its NetworkPolicy — but both are kept (and with them
//! the pods holding the logs) when archival failed, so the lifecycle controller's
//! resync can try again. NetworkPolicies left without a RayJob (a crash between the
//! two deletes, a dispatch that never created its RayJob) are removed by the resync
//! ([`Jobs::sweep_network_policies`]).
//!
//! The delete is the leader's side effect (or a user's cancel): the controllers' copy
//! checks its term right before it.
//!
//! Clean-ups run off the lifecycle controller's event loop (which handles events one
//! at a time to keep each RayJob's transitions in order): at most one per RayJob and a
//! bounded number at once ([`super::inflight::InFlight`]).

use kube::ResourceExt;

use super::error::JobError;
use super::service::Jobs;
use crate::cluster::api_error::{Failure, classify};
use crate::cluster::labels::LABEL_JOB_ID;
use crate::cluster::{LogSource, RayJob};
use crate::objects::log_key;
use crate::store::JobRecord;

/// Most bytes of one archived log (the tail is kept).
const MAX_LOG_BYTES: i64 = 64 * 1024 * 1024;

impl Jobs {
    /// Archives `job`'s logs and deletes its RayJob in the background, unless a
    /// clean-up of that RayJob is already running.
    pub(crate) fn start_cleanup(&self, job: JobRecord, rayjob: RayJob) {
        let this = self.clone();
        self.cleanups.spawn(rayjob.name_any(), async move {
            if let Err(e) = this.archive_then_delete(&job, &rayjob).await {
                tracing::warn!(job = %job.id, "clean-up (retried at the next resync): {e}");
            }
        });
    }

    /// Archives a finished job's logs, then deletes its RayJob; keeps the RayJob when
    /// archival failed.
    pub(crate) async fn archive_then_delete(
        &self,
        job: &JobRecord,
        rayjob: &RayJob,
    ) -> Result<(), JobError> {
        let name = rayjob.name_any();
        if !self.archive_logs(job, &name).await {
            return Err(JobError::Io(format!(
                "archiving the logs of job {} failed; RayJob {name} kept for a retry",
                job.id
            )));
        }
        self.may_act("delete")?;
        self.metrics.rayjob_write("delete");
        self.cluster.rayjobs.delete(&name).await?;
        Ok(self.cluster.network_policies.delete(&name).await?)
    }

    /// Deletes the gateway's NetworkPolicies whose job is over (or unknown) and whose
    /// RayJob is gone: what an interrupted clean-up or dispatch left behind.
    pub(crate) async fn sweep_network_policies(&self) -> Result<(), JobError> {
        for policy in self.cluster.network_policies.list_own().await? {
            let name = policy.name_any();
            let job = match policy.labels().get(LABEL_JOB_ID) {
                Some(id) => self.store.get(id).await?,
                None => None,
            };
            if job.is_some_and(|j| !j.state.is_terminal()) {
                continue; // queued again for a retry, or running: still needed
            }
            if self.cluster.rayjobs.get(&name).await?.is_some() {
                continue; // its clean-up deletes it
            }
            self.may_act("delete")?;
            tracing::info!(policy = %name, "deleting a NetworkPolicy left without its job");
            self.cluster.network_policies.delete(&name).await?;
        }
        Ok(())
    }

    /// Archives the driver and head logs of a job. A pod that does not exist (the job
    /// never got that far) is not an error. Returns false when a log that exists could
    /// not be archived (the API server or the storage kept failing).
    async fn archive_logs(&self, job: &JobRecord, rayjob: &str) -> bool {
        let mut complete = true;
        for source in LogSource::ALL {
            match self.archive_log(job, rayjob, source).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(job = %job.id, "archiving the {} log: {e}", source.as_str());
                    complete = false;
                }
            }
        }
        complete
    }

    async fn archive_log(
        &self,
        job: &JobRecord,
        rayjob: &str,
        source: LogSource,
    ) -> Result<(), JobError> {
        let key = log_key(&job.id, source.as_str())?;
        if self.objects.get_object(&key).await.is_ok() {
            return Ok(()); // archived before (e.g. by a previous run of the controller)
        }
        let Some((pod, container)) = self.cluster.pods.log_pod(&job.id, rayjob, source).await?
        else {
            return Ok(());
        };
        let pod_name = pod.name_any();
        let text = match self
            .cluster
            .pods
            .log(&pod_name, container, Some(MAX_LOG_BYTES))
            .await
        {
            Ok(t) => t,
            Err(e) => match classify(&e) {
                // The pod is gone.
                Failure::NotFound => return Ok(()),
                // The container never started ("is waiting to start"): there is no log
                // to archive, and waiting will not make one appear.
                Failure::Refused => {
                    tracing::debug!(job = %job.id, pod = %pod_name, "no {} log: {e}", source.as_str());
                    return Ok(());
                }
                _ => return Err(e.into()),
            },
        };
        self.objects
            .put_object(&key, text.into_bytes().into())
            .await?;
        self.metrics.log_archived();
        Ok(())
    }
}
