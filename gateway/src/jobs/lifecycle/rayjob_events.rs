//! What a RayJob's status means for its job: the transitions KubeRay's status maps to
//! (`kuberay_status.rs`), the pre-running deadline, an OOM kill in a failing job's
//! reason, the clean-up of a finished job, and — after every watcher list and resync —
//! the reconcile of the store with the RayJobs that exist.
//!
//! Only the RayJob of the job's current attempt speaks for it: a preempted job's
//! earlier RayJob may report `STOPPED` or its deletion after the job was queued or
//! dispatched again, and those events are no news.

use std::collections::BTreeSet;

use kube::ResourceExt;

use super::kuberay_status::target_state;
use super::owners::job_id_of;
use super::release::ReleaseCause;
use super::{Lifecycle, Listed};
use crate::cluster::RayJob;
use crate::cluster::labels::LABEL_JOB_ID;
use crate::domain::JobState;
use crate::jobs::error::JobError;
use crate::jobs::logs::diagnosis::first_oom_kill;
use crate::jobs::pre_running;
use crate::store::{JobRecord, StoreError, Transition};

impl Lifecycle {
    /// A resync round's list: every RayJob of this installation (a LIST, not the
    /// watch) with its job, looked at afterwards as the controller has room; then
    /// NetworkPolicies left without their job are swept (a failure there is logged:
    /// the RayJobs are still looked at).
    pub(super) async fn resync_list(&self) -> Result<Listed, JobError> {
        let all = self.cluster.rayjobs.list_own().await?;
        let names: BTreeSet<String> = all.iter().map(ResourceExt::name_any).collect();
        if let Err(e) = self.requeue_never_created(&names).await {
            tracing::warn!("lifecycle resync, dispatched jobs: {e}");
        }
        let mut jobs = self.owners_of(&all).await?;
        let listed = all
            .into_iter()
            .map(|obj| {
                let job = job_id_of(&obj).and_then(|id| jobs.remove(id)).map(Box::new);
                (obj.name_any(), (obj, job))
            })
            .collect();
        if let Err(e) = self.sweep_network_policies().await {
            tracing::warn!("lifecycle resync, NetworkPolicies: {e}");
        }
        Ok(listed)
    }

    /// A RayJob was seen: move its job to what its status says.
    pub(super) async fn on_rayjob(&self, obj: &RayJob) -> Result<(), JobError> {
        if obj.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let job = match job_id_of(obj) {
            Some(id) => self.core.store.get(id).await?,
            None => None,
        };
        self.on_rayjob_of(obj, job).await
    }

    /// [`Jobs::on_rayjob`] with the RayJob's job already read (`None`: the store does
    /// not know it).
    pub(super) async fn on_rayjob_of(
        &self,
        obj: &RayJob,
        job: Option<JobRecord>,
    ) -> Result<(), JobError> {
        let name = obj.name_any();
        if obj.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let Some(job) = job else {
            // Ours by its label, but no job of the store owns it: reported by the orphan
            // scan, never deleted (the store may be an old backup).
            tracing::debug!(rayjob = %name, "a RayJob of no known job: left alone");
            return Ok(());
        };
        if job.rayjob_name.as_deref().is_some_and(|n| n != name) {
            tracing::debug!(rayjob = %name, job = %job.id, "not the job's RayJob: left alone");
            return Ok(());
        }
        if !self.follows(&job) {
            // The job was dispatched to another fleet: this one is no RayJob of its
            // (the orphan scan reports it).
            tracing::warn!(rayjob = %name, job = %job.id, fleet = %self.cluster.fleet, "a RayJob of a job dispatched to another fleet: left alone");
            return Ok(());
        }
        if job.state.is_terminal() {
            // Cancelled, or finished but not yet cleaned up (e.g. a crash before the delete).
            self.start_cleanup(job, obj.clone());
            return Ok(());
        }
        if job.state == JobState::Preempting {
            return self.on_preempted_rayjob(job, obj).await;
        }
        // Its status is news only while the job runs on this RayJob, here and after any
        // re-read: the job read may be older than a preemption notice (`preempting` is
        // the release's to end), and a job queued again after one was released from
        // this RayJob (an ended attempt's: its last status, STOPPED, is no news).
        let attempt = job.attempt;
        let on_this_rayjob = move |j: &JobRecord| {
            j.attempt == attempt
                && matches!(
                    j.state,
                    JobState::Dispatched | JobState::Initializing | JobState::Running
                )
        };
        if !on_this_rayjob(&job) {
            tracing::debug!(rayjob = %name, job = %job.id, "an earlier attempt's RayJob: left alone");
            return Ok(());
        }
        let (mut to, mut reason) = target_state(&obj.status_or_default());
        if !to.is_terminal()
            && to != JobState::Running
            && let Some(why) = pre_running::overrun(
                &job.spec,
                &self.core.config,
                obj,
                k8s_openapi::jiff::Timestamp::now(),
            )
        {
            // The operator did not time it out (an older KubeRay ignores the field).
            (to, reason) = (JobState::TimedOut, why);
        }
        if to == JobState::Failed
            && let Some(oom) = self.oom_kill_of(&job.id, &name).await
        {
            reason = format!("{reason}; {oom}");
        }
        let job = if to.is_terminal() && job.state == JobState::Dispatched {
            // Record the passage through initializing for a job that ended before we saw it run.
            self.core
                .advance_while(
                    job,
                    JobState::Initializing,
                    "kuberay.New".into(),
                    on_this_rayjob,
                )
                .await?
        } else {
            job
        };
        let job = if to == JobState::Succeeded && job.state == JobState::Initializing {
            // A job that completed ran, even when the watch missed its Running status (a
            // dropped watch, a restart): record the passage so no transition is lost.
            let reason = "kuberay.running: inferred, the job completed before Running was seen";
            self.core
                .advance_while(job, JobState::Running, reason.into(), on_this_rayjob)
                .await?
        } else {
            job
        };
        let job = self
            .core
            .advance_while(job, to, reason, on_this_rayjob)
            .await?;
        if job.state.is_terminal() {
            self.start_cleanup(job, obj.clone());
        }
        Ok(())
    }

    /// The first OOM kill among a failing job's pods, which names its likely cause
    /// (best effort: a failed lookup only loses that detail).
    async fn oom_kill_of(&self, job_id: &str, rayjob: &str) -> Option<String> {
        match self.cluster.pods.of_job(job_id, rayjob).await {
            Ok(pods) => first_oom_kill(pods.iter()),
            Err(e) => {
                tracing::warn!(job = %job_id, "looking for OOM kills: {e}");
                None
            }
        }
    }

    /// A RayJob was deleted: a job still holding GPUs through it has failed.
    pub(super) async fn on_rayjob_deleted(&self, obj: &RayJob) -> Result<(), JobError> {
        let Some(id) = obj.labels().get(LABEL_JOB_ID) else {
            return Ok(());
        };
        let Some(job) = self.core.store.get(id).await? else {
            return Ok(());
        };
        if job.rayjob_name.as_deref() != Some(obj.name_any().as_str()) || !self.follows(&job) {
            // An earlier attempt's RayJob, deleted by its release while (or after) the
            // job was dispatched again, or one in another fleet than the job's: the job
            // runs on another one.
            return Ok(());
        }
        if job.state == JobState::Preempting {
            self.start_release(job, ReleaseCause::RayJobGone);
        } else if job.state.holds_gpus() {
            let reason = "rayjob.deleted: the RayJob was deleted outside Forge".to_string();
            self.core.advance(job, JobState::Failed, reason).await?;
        }
        Ok(())
    }

    /// Queues again each job dispatched to this fleet whose RayJob the fleet says does
    /// not exist (`listed`: the RayJobs a list just saw), and whose create is not in
    /// flight here: a create whose outcome was unknown (`dispatch::create`) or that
    /// a crashed leader never sent. Asked by name, so a create after the list counts.
    async fn requeue_never_created(&self, listed: &BTreeSet<String>) -> Result<(), JobError> {
        for job in self.core.store.active().await? {
            if job.state != JobState::Dispatched
                || !self.follows(&job)
                || self.creating.contains(&job.id)
            {
                continue;
            }
            let Some(name) = job.rayjob_name.as_deref() else {
                continue;
            };
            if listed.contains(name) || self.cluster.rayjobs.get(name).await?.is_some() {
                continue;
            }
            self.queue_again_never_created(&job.id).await?;
        }
        Ok(())
    }

    /// Puts a dispatched job whose RayJob was never created back in the queue (a job
    /// no longer dispatched is left as it is).
    async fn queue_again_never_created(&self, job_id: &str) -> Result<(), JobError> {
        let t = Transition::new(
            job_id,
            JobState::Dispatched,
            JobState::Queued,
            Some("dispatch.retry: the RayJob was never created; queued again".into()),
        );
        match self.core.transition(t).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// After a (re)list: fix jobs whose RayJob is missing (`seen`: the RayJobs listed;
    /// `busy`: RayJobs whose watch events are being handled, left to those).
    pub(super) async fn reconcile(
        &self,
        seen: &BTreeSet<String>,
        busy: impl Fn(&str) -> bool,
    ) -> Result<(), JobError> {
        for job in self.core.store.active().await? {
            let Some(name) = job.rayjob_name.clone() else {
                continue;
            };
            if !self.follows(&job) {
                continue; // its fleet's controller reconciles it
            }
            // Seen in the list, or its create is in flight here (not reaching the API
            // server yet is not "never created": that create decides, see claims.rs).
            if seen.contains(&name)
                || busy(&name)
                || (job.state == JobState::Dispatched && self.creating.contains(&job.id))
            {
                continue;
            }
            // The watcher's list may predate a create that just happened: ask directly.
            match self.cluster.rayjobs.get(&name).await? {
                Some(obj) if !self.cluster.rayjobs.is_own(&obj) => {
                    // Its name is ours but its label is another installation's: reported
                    // by the orphan scan; this job is left as it is.
                    tracing::warn!(job = %job.id, rayjob = %name, "the job's RayJob belongs to another installation");
                }
                Some(obj) => self.on_rayjob(&obj).await?,
                None if job.state == JobState::Dispatched => {
                    self.queue_again_never_created(&job.id).await?;
                }
                None if job.state == JobState::Preempting => {
                    self.start_release(job, ReleaseCause::RayJobGone);
                }
                None => {
                    let reason = "rayjob.vanished: the RayJob disappeared".to_string();
                    self.core.advance(job, JobState::Failed, reason).await?;
                }
            }
        }
        Ok(())
    }
}
