//! The lifecycle controller: follows this installation's RayJobs (a kube-runtime
//! watcher on `app.kubernetes.io/managed-by=forge-gateway` **and**
//! `forge.dev/instance=<the store's identity>`) and moves each job through
//! dispatched → initializing → running → succeeded | failed | cancelled | timed-out
//! ([`super::kuberay_status`]), persisting every transition with its reason. On a
//! terminal status the job's logs are archived and its RayJob deleted at once
//! ([`super::cleanup`]; the operator's TTL is only the fallback). A job not running by
//! its pre-running deadline is timed out here even when the operator ignores
//! `preRunningDeadlineSeconds` ([`super::pre_running`]). A failing job whose pods show an
//! OOM kill gets it in its reason (`…; Pod/<name>: container ray-worker was OOMKilled
//! (limit 8Gi)`).
//!
//! It never deletes a RayJob it cannot prove it created: one of its own identity whose
//! job the store does not know (a store restored from an old backup) is left alone and
//! reported, like RayJobs of other installations ([`super::orphans`]). Only the leader
//! runs it, on a [`Jobs`] bound to its term (fenced writes, deletes checked first).
//!
//! Events of different RayJobs are handled concurrently (at most [`CONCURRENCY`] at
//! once, each waiting on its own store write, which group commit shares); one
//! RayJob's events are handled in the order they came ([`super::per_key`]). The resync
//! and the reconcile after a list leave RayJobs with events in hand to those, so one
//! event stuck on a slow API server call holds back only its own RayJob.
//!
//! Every [`RESYNC`] the gateway's RayJobs are listed again, events or not: that
//! finishes what a transient failure interrupted (archival, delete). After the
//! watcher's initial list (every start and every relist) the store is reconciled with
//! what exists: a dispatched job without its RayJob (the gateway died between
//! persisting the intent and creating it) goes back to the queue; a job that was
//! initializing or running and whose RayJob vanished is failed.
//!
//! Why a watcher and not `kube::runtime::Controller`: the controller reconciles objects
//! that exist, while half of this job is about jobs whose RayJob does *not* exist (never
//! created, vanished), which only the store knows — so the loop is driven by the
//! watcher's list boundaries and the store, not by object keys.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, watcher};

use super::diagnosis::first_oom_kill;
use super::error::JobError;
use super::kuberay_status::target_state;
use super::owners::job_id_of;
use super::per_key::PerKey;
use super::pre_running;
use super::service::Jobs;
use crate::cluster::RayJob;
use crate::cluster::labels::LABEL_JOB_ID;
use crate::domain::JobState;
use crate::store::{JobRecord, StoreError, Transition};

/// How often every RayJob of the gateway is looked at again, events or not.
const RESYNC: Duration = Duration::from_secs(10);

/// RayJobs whose watch events are handled at once (each waits on its own store
/// write); one RayJob's events are handled one after another, in order.
const CONCURRENCY: usize = 32;

/// Runs the controller until the task is aborted.
///
/// Events of different RayJobs are handled concurrently ([`PerKey`]).
pub fn spawn(jobs: Jobs) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels(&jobs.cluster.rayjobs.own_selector());
        let api = jobs.cluster.rayjobs.api().clone();
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut handling = Handling::new(&jobs);
        loop {
            let event = tokio::select! {
                Some(()) = handling.next_done(), if handling.running() > 0 => continue,
                ev = stream.next(), if handling.running() < CONCURRENCY => match ev {
                    Some(ev) => ev,
                    None => break,
                },
                _ = resync.tick() => {
                    if let Err(e) = jobs.resync(|rayjob| handling.keys.is_busy(rayjob)).await {
                        tracing::warn!("lifecycle resync: {e}");
                    }
                    jobs.metrics.rayjob_resynced();
                    continue;
                }
            };
            match event {
                Ok(watcher::Event::Init) => seen.clear(),
                Ok(watcher::Event::InitApply(obj)) => {
                    seen.insert(obj.name_any());
                    handling.offer(Work::Seen(obj));
                }
                Ok(watcher::Event::InitDone) => {
                    if let Err(e) = jobs
                        .reconcile(&seen, |rayjob| handling.keys.is_busy(rayjob))
                        .await
                    {
                        tracing::warn!("lifecycle: {e}");
                    }
                    jobs.metrics.rayjob_relisted();
                }
                Ok(watcher::Event::Apply(obj)) => handling.offer(Work::Seen(obj)),
                Ok(watcher::Event::Delete(obj)) => handling.offer(Work::Deleted(obj)),
                Err(e) => tracing::warn!("RayJob watch error (retrying with backoff): {e}"),
            }
        }
        handling.finish().await;
    })
}

/// What one watch event asks of the controller for its RayJob.
enum Work {
    /// The RayJob as it is now (added or changed).
    Seen(RayJob),
    /// The RayJob was deleted.
    Deleted(RayJob),
}

/// The events being handled, at most one per RayJob at a time.
struct Handling<'a> {
    jobs: &'a Jobs,
    keys: PerKey<Work>,
    running: FuturesUnordered<BoxFuture<'a, String>>,
}

impl<'a> Handling<'a> {
    fn new(jobs: &'a Jobs) -> Self {
        Self {
            jobs,
            keys: PerKey::default(),
            running: FuturesUnordered::new(),
        }
    }

    /// Handles `work` now, or after the work before it for the same RayJob.
    fn offer(&mut self, work: Work) {
        let (Work::Seen(obj) | Work::Deleted(obj)) = &work;
        let key = obj.name_any();
        if let Some(work) = self.keys.offer(&key, work) {
            self.start(key, work);
        }
    }

    fn start(&mut self, key: String, work: Work) {
        let jobs = self.jobs;
        self.running.push(Box::pin(async move {
            let result = match &work {
                Work::Seen(obj) => jobs.on_rayjob(obj).await,
                Work::Deleted(obj) => jobs.on_rayjob_deleted(obj).await,
            };
            if let Err(e) = result {
                tracing::warn!(rayjob = %key, "lifecycle: {e}");
            }
            key
        }));
    }

    /// RayJobs with an event being handled.
    fn running(&self) -> usize {
        self.running.len()
    }

    /// Waits for one event to be handled, then starts the next one of its RayJob;
    /// `None` when nothing is being handled.
    async fn next_done(&mut self) -> Option<()> {
        let key = self.running.next().await?;
        if let Some(next) = self.keys.done(&key) {
            self.start(key, next);
        }
        Some(())
    }

    /// Waits until every event offered so far is handled.
    async fn finish(&mut self) {
        while self.next_done().await.is_some() {}
        debug_assert_eq!(self.keys.running(), 0);
    }
}

impl Jobs {
    /// Looks at every RayJob of this installation again (a LIST, not the watch), then at
    /// NetworkPolicies left without their job. RayJobs `busy` names have watch events
    /// being handled, which see them as they are now: left to those.
    async fn resync(&self, busy: impl Fn(&str) -> bool) -> Result<(), JobError> {
        let all = self.cluster.rayjobs.list_own().await?;
        let mut jobs = self.owners_of(&all).await?;
        for obj in &all {
            if busy(&obj.name_any()) {
                continue;
            }
            let job = job_id_of(obj).and_then(|id| jobs.remove(id));
            if let Err(e) = self.on_rayjob_of(obj, job).await {
                tracing::warn!(rayjob = %obj.name_any(), "lifecycle resync: {e}");
            }
        }
        self.sweep_network_policies().await
    }

    /// A RayJob was seen: move its job to what its status says.
    async fn on_rayjob(&self, obj: &RayJob) -> Result<(), JobError> {
        if obj.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let job = match job_id_of(obj) {
            Some(id) => self.store.get(id).await?,
            None => None,
        };
        self.on_rayjob_of(obj, job).await
    }

    /// [`Jobs::on_rayjob`] with the RayJob's job already read (`None`: the store does
    /// not know it).
    async fn on_rayjob_of(&self, obj: &RayJob, job: Option<JobRecord>) -> Result<(), JobError> {
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
        if job.state.is_terminal() {
            // Cancelled, or finished but not yet cleaned up (e.g. a crash before the delete).
            self.start_cleanup(job, obj.clone());
            return Ok(());
        }
        let (mut to, mut reason) = target_state(&obj.status_or_default());
        if !to.is_terminal()
            && to != JobState::Running
            && let Some(why) = pre_running::overrun(
                &job.spec,
                &self.config,
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
            self.advance(job, JobState::Initializing, "kuberay.New".into())
                .await?
        } else {
            job
        };
        let job = if to == JobState::Succeeded && job.state == JobState::Initializing {
            // A job that completed ran, even when the watch missed its Running status (a
            // dropped watch, a restart): record the passage so no transition is lost.
            let reason = "kuberay.running: inferred, the job completed before Running was seen";
            self.advance(job, JobState::Running, reason.into()).await?
        } else {
            job
        };
        let job = self.advance(job, to, reason).await?;
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
    async fn on_rayjob_deleted(&self, obj: &RayJob) -> Result<(), JobError> {
        let Some(id) = obj.labels().get(LABEL_JOB_ID) else {
            return Ok(());
        };
        let Some(job) = self.store.get(id).await? else {
            return Ok(());
        };
        if job.state.holds_gpus() {
            let reason = "rayjob.deleted: the RayJob was deleted outside Forge".to_string();
            self.advance(job, JobState::Failed, reason).await?;
        }
        Ok(())
    }

    /// After a (re)list: fix jobs whose RayJob is missing (`seen`: the RayJobs listed;
    /// `busy`: RayJobs whose watch events are being handled, left to those).
    async fn reconcile(
        &self,
        seen: &BTreeSet<String>,
        busy: impl Fn(&str) -> bool,
    ) -> Result<(), JobError> {
        for job in self.store.active().await? {
            let Some(name) = job.rayjob_name.clone() else {
                continue;
            };
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
                    let t = Transition::new(
                        &job.id,
                        JobState::Dispatched,
                        JobState::Queued,
                        Some("dispatch.retry: the RayJob was never created; queued again".into()),
                    );
                    match self.transition(t).await {
                        Ok(_) | Err(StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                None => {
                    let reason = "rayjob.vanished: the RayJob disappeared".to_string();
                    self.advance(job, JobState::Failed, reason).await?;
                }
            }
        }
        Ok(())
    }
}
