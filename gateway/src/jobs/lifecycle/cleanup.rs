//! Archive-then-delete, the one way a finished job's RayJob goes away: its logs (every
//! container of every pod: head, workers, submitters, each bounded to its tail by
//! `FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD`) and the Kubernetes events of its objects are
//! archived to object storage beside the capsule, then
//! the RayJob is deleted, then its NetworkPolicy — but both are kept (and with them
//! the pods holding the logs) when archival failed, so the lifecycle controller's
//! resync can try again. NetworkPolicies left without a RayJob (a crash between the
//! two deletes, a dispatch that never created its RayJob) are removed by the resync
//! ([`Lifecycle::sweep_network_policies`]).
//!
//! The delete is the leader's side effect (or a user's cancel): the controllers' copy
//! checks its term right before it.
//!
//! Clean-ups run off the lifecycle controller's event loop (which handles events one
//! at a time to keep each RayJob's transitions in order): at most one per RayJob and a
//! bounded number at once (`inflight.rs`).

use futures::AsyncReadExt;
use kube::ResourceExt;

use super::Lifecycle;
use super::owners::job_id_of;
use crate::cluster::api_error::{Failure, classify};
use crate::cluster::{LogSource, RayJob};
use crate::jobs::error::JobError;
use crate::jobs::logs::log_tail::TailSpool;
use crate::jobs::logs::pod_logs::{PodLog, PodLogIndex, PodRole, containers_of, role_rank};
use crate::objects::{attempt_log_index_key, log_index_key, log_key, pod_log_key};
use crate::store::JobRecord;
use crate::telemetry::job_trace::{JobTrace, LiveSpan};
use tracing::Instrument as _;

impl Lifecycle {
    /// Archives `job`'s logs and deletes its RayJob in the background, unless a
    /// clean-up of that RayJob is already running — after stopping its Ray job and
    /// waiting for its end if it still runs (`stop_first.rs`; that wait holds none of
    /// the clean-ups' permits).
    pub(crate) fn start_cleanup(&self, job: JobRecord, rayjob: RayJob) {
        let (this, first) = (self.clone(), self.clone());
        let (job_first, rayjob_first) = (job.clone(), rayjob.clone());
        self.cleanups.spawn_after(
            rayjob.name_any(),
            async move { first.stop_first(&job_first, &rayjob_first).await },
            async move {
                if let Err(e) = this.archive_then_delete(&job, &rayjob).await {
                    tracing::warn!(job = %job.id, "clean-up (retried at the next resync): {e}");
                }
                None
            },
        );
    }

    /// Archives a finished job's logs, then deletes its RayJob; keeps the RayJob when
    /// archival failed.
    pub(crate) async fn archive_then_delete(
        &self,
        job: &JobRecord,
        rayjob: &RayJob,
    ) -> Result<(), JobError> {
        // One at a time per job: a second caller finds the archive complete and only
        // deletes (a cancel racing the controller's clean-up used to archive the pods
        // the first had deleted, and overwrite its list with "not archived").
        let stripe = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            job.id.hash(&mut h);
            usize::try_from(h.finish()).unwrap_or(0) % self.archiving.len().max(1)
        };
        let _one_at_a_time = self.archiving[stripe].lock().await;
        let name = rayjob.name_any();
        let archived = self
            .archive_logs(job, &name, None)
            .instrument(JobTrace::span_of(job, LiveSpan::Archive))
            .await;
        if !archived {
            return Err(JobError::Invariant(format!(
                "archiving the logs of job {} failed; RayJob {name} kept for a retry",
                job.id
            )));
        }
        self.core.may_act("delete")?;
        self.core.metrics.rayjob_write("delete");
        let cluster = self.of(job)?;
        async {
            cluster.rayjobs.delete(&name).await?;
            let policy = crate::manifests::network::policy_name(&job.id);
            Ok(cluster.network_policies.delete(&policy).await?)
        }
        .instrument(JobTrace::span_of(job, LiveSpan::Delete))
        .await
    }

    /// Deletes the gateway's NetworkPolicies whose job is over (or unknown) and whose
    /// RayJob is gone: what an interrupted clean-up or dispatch left behind.
    pub(crate) async fn sweep_network_policies(&self) -> Result<(), JobError> {
        let policies = self.cluster.network_policies.list_own().await?;
        let jobs = self.owners_of(&policies).await?;
        for policy in &policies {
            let name = policy.name_any();
            let job = job_id_of(policy).and_then(|id| jobs.get(id));
            if job.is_some_and(|j| !j.state.is_terminal() && self.follows(j)) {
                continue; // queued again for a retry, or running here: still needed
            }
            if self.cluster.rayjobs.get(&name).await?.is_some() {
                continue; // its clean-up deletes it
            }
            self.core.may_act("delete")?;
            tracing::info!(policy = %name, "deleting a NetworkPolicy left without its job");
            self.cluster.network_policies.delete(&name).await?;
        }
        Ok(())
    }

    /// Archives the log of every container of every pod of a job (head, workers,
    /// submitters), each bounded to its tail (`logs/log_tail.rs`), then the list of
    /// them ([`PodLogIndex`]), which marks the archive complete. A pod that is gone or
    /// a container that never started is listed as not archived, not an error.
    /// Returns false when a log that exists could not be archived (the API server or
    /// the storage kept failing): the whole archive is tried again.
    ///
    /// `attempt`: a preempted attempt's logs, listed under that attempt
    /// ([`attempt_log_index_key`]); `None`: the job's last run.
    pub(crate) async fn archive_logs(
        &self,
        job: &JobRecord,
        rayjob: &str,
        attempt: Option<u32>,
    ) -> bool {
        match self.archive_pod_logs(job, rayjob, attempt).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(job = %job.id, "archiving the pod logs: {e}");
                false
            }
        }
    }

    async fn archive_pod_logs(
        &self,
        job: &JobRecord,
        rayjob: &str,
        attempt: Option<u32>,
    ) -> Result<(), JobError> {
        let index_key = match attempt {
            Some(n) => attempt_log_index_key(&job.id, n)?,
            None => log_index_key(&job.id)?,
        };
        let legacy = attempt.is_none()
            && self
                .objects
                .object_len(&log_key(&job.id, "driver")?)
                .await?
                .is_some();
        if legacy || self.objects.object_len(&index_key).await?.is_some() {
            return Ok(()); // archived before (e.g. by a previous run of the controller)
        }
        let cluster = self.of(job)?;
        let pods = &cluster.pods;
        let mut all = pods.of_job(&job.id, rayjob).await?;
        all.sort_by_key(|p| (role_rank(PodRole::of(p)), p.name_any()));
        let newest = |source: LogSource| async move {
            pods.log_pod(&job.id, rayjob, source)
                .await
                .map(|found| found.map(|(p, _)| p.name_any()))
        };
        // Best effort, bounded: a job whose events cannot be read is still archived.
        let events = match crate::jobs::logs::within(
            "the job's events",
            self.logs.events_of_job(cluster, rayjob, &all),
        )
        .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(job = %job.id, "archiving without its events: {e}");
                Vec::new()
            }
        };
        let mut index = PodLogIndex {
            pods: Vec::new(),
            driver: newest(LogSource::Driver).await?,
            head: newest(LogSource::Head).await?,
            events,
        };
        for pod in &all {
            let name = pod.name_any();
            for container in containers_of(pod) {
                let entry = self.archive_pod_log(job, &name, &container).await?;
                index.pods.push(PodLog {
                    pod: name.clone(),
                    role: PodRole::of(pod),
                    container,
                    bytes: entry.map(|(bytes, _)| bytes),
                    truncated: entry.is_some_and(|(_, cut)| cut > 0),
                    cut_bytes: entry.map_or(0, |(_, cut)| cut),
                    archived: entry.is_some(),
                });
            }
        }
        // Another replica may have completed the archive meanwhile (a cancel there and
        // the clean-up here): its list stands, this one is not written over it.
        if self.objects.object_len(&index_key).await?.is_some() {
            return Ok(());
        }
        let body = serde_json::to_vec(&index).map_err(|e| JobError::io("the pod log index", e))?;
        self.objects.put_object(&index_key, body.into()).await?;
        tracing::info!(
            job = %job.id,
            containers = index.pods.len(),
            archived = index.pods.iter().filter(|p| p.archived).count(),
            "logs archived"
        );
        Ok(())
    }

    /// Streams one container's log into storage, keeping its tail; returns the
    /// archive's bytes and the bytes cut, or `None` when there is no log to archive.
    async fn archive_pod_log(
        &self,
        job: &JobRecord,
        pod: &str,
        container: &str,
    ) -> Result<Option<(u64, u64)>, JobError> {
        let mut reader = match self
            .of(job)?
            .pods
            .log_stream(pod, Some(container), false)
            .await
        {
            Ok(r) => r,
            Err(e) => match classify(&e) {
                // The pod is gone.
                Failure::NotFound => return Ok(None),
                // The container never started ("is waiting to start"): there is no log
                // to archive, and waiting will not make one appear.
                Failure::Refused => {
                    tracing::debug!(job = %job.id, pod, container, "no log: {e}");
                    return Ok(None);
                }
                _ => return Err(e.into()),
            },
        };
        let dir = crate::spool::dir(&self.core.config.gateway.data_dir);
        let mut spool = TailSpool::new(&dir, self.logs.log_bound())
            .map_err(|e| JobError::io("log spool", e))?;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = reader
                .read(&mut buf)
                .await
                .map_err(|e| JobError::io(format!("reading the log of {pod}/{container}"), e))?;
            if n == 0 {
                break;
            }
            spool
                .write(&buf[..n])
                .await
                .map_err(|e| JobError::io("log spool", e))?;
        }
        let tail = spool
            .finish()
            .await
            .map_err(|e| JobError::io("log spool", e))?;
        let key = pod_log_key(&job.id, pod, container)?;
        self.objects.put_object_file(&key, tail.file.path()).await?;
        self.core.metrics.log_archived();
        Ok(Some((tail.bytes, tail.cut)))
    }
}
