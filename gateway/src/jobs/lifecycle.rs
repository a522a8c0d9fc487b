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
//! finishes what a transient failure interrupted (archival, delete). The round runs
//! beside the watch events, not instead of them: its LIST (seconds for thousands of
//! RayJobs on a real API server) is awaited while events are handled, and what it
//! listed is looked at as the controller has room ([`super::resync_round`]). After the
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
use super::resync_round::ResyncRound;
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

/// Of those, at most this many are a resync round's RayJobs: the watch's events keep
/// the rest of the room while a round of thousands is looked at.
const RESYNC_SHARE: usize = CONCURRENCY / 2;

/// Runs the controller until the task is aborted.
///
/// Events of different RayJobs are handled concurrently ([`PerKey`]); a resync round
/// runs beside them ([`ResyncRound`]). The reconcile after a watcher list is still
/// awaited in the loop (it comes only with a list, and needs the list's names).
pub fn spawn(jobs: Jobs) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels(&jobs.cluster.rayjobs.own_selector());
        let api = jobs.cluster.rayjobs.api().clone();
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut handling = Handling::new(&jobs);
        // The resync round's LIST while it is on its way.
        let mut listing: Option<BoxFuture<'_, Result<Listed, JobError>>> = None;
        loop {
            handling.feed_resync();
            let event = tokio::select! {
                Some(()) = handling.next_done(), if handling.running() > 0 => continue,
                listed = async { listing.as_mut().expect("guarded: a list on its way").await },
                    if listing.is_some() =>
                {
                    listing = None;
                    match listed {
                        Ok(items) => handling.round.listed(items),
                        Err(e) => {
                            tracing::warn!("lifecycle resync: {e}");
                            handling.round.list_failed();
                        }
                    }
                    continue;
                }
                ev = stream.next(), if handling.running() < CONCURRENCY => match ev {
                    Some(ev) => ev,
                    None => break,
                },
                _ = resync.tick(), if !handling.round.in_progress() => {
                    handling.round.begin(handling.keys.busy_keys());
                    listing = Some(Box::pin(jobs.resync_list()));
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

/// What a resync round listed: each RayJob under its name, with its job as the store
/// had it then (`None`: no job of the store owns it).
type Listed = Vec<(String, (RayJob, Option<Box<JobRecord>>))>;

/// What the controller does for one RayJob.
enum Work {
    /// The watch saw the RayJob as it is now (added or changed).
    Seen(RayJob),
    /// The watch saw the RayJob deleted.
    Deleted(RayJob),
    /// A resync round listed it, with its job as read then.
    Resynced(RayJob, Option<Box<JobRecord>>),
}

impl Work {
    /// The RayJob it is about (its name: work is ordered and skipped per name).
    fn key(&self) -> String {
        let (Self::Seen(obj) | Self::Deleted(obj) | Self::Resynced(obj, _)) = self;
        obj.name_any()
    }
}

/// The work being handled, at most one per RayJob at a time, and the resync round.
struct Handling<'a> {
    jobs: &'a Jobs,
    keys: PerKey<Work>,
    /// Each finished future gives its RayJob and whether it was a resync round's item.
    running: FuturesUnordered<BoxFuture<'a, (String, bool)>>,
    round: ResyncRound<(RayJob, Option<Box<JobRecord>>)>,
}

impl<'a> Handling<'a> {
    fn new(jobs: &'a Jobs) -> Self {
        Self {
            jobs,
            keys: PerKey::default(),
            running: FuturesUnordered::new(),
            round: ResyncRound::default(),
        }
    }

    /// Handles a watch event now, or after the work before it for the same RayJob.
    fn offer(&mut self, work: Work) {
        let key = work.key();
        self.round.touched(&key);
        if let Some(work) = self.keys.offer(&key, work) {
            self.start(key, work);
        }
    }

    /// Starts the resync round's listed RayJobs while there is room (those the watch
    /// spoke for are left to it), and counts the round when it is over.
    fn feed_resync(&mut self) {
        while self.running() < CONCURRENCY && self.round.running() < RESYNC_SHARE {
            let Some((key, (obj, job))) = self.round.next(|k| self.keys.is_busy(k)) else {
                break;
            };
            if let Some(work) = self.keys.offer(&key, Work::Resynced(obj, job)) {
                self.start(key, work);
            }
        }
        if self.round.take_finished() {
            self.jobs.metrics.rayjob_resynced();
        }
    }

    fn start(&mut self, key: String, work: Work) {
        let jobs = self.jobs;
        let resynced = matches!(work, Work::Resynced(..));
        self.running.push(Box::pin(async move {
            let result = match work {
                Work::Seen(obj) => jobs.on_rayjob(&obj).await,
                Work::Deleted(obj) => jobs.on_rayjob_deleted(&obj).await,
                Work::Resynced(obj, job) => jobs.on_rayjob_of(&obj, job.map(|j| *j)).await,
            };
            if let Err(e) = result {
                let what = if resynced {
                    "lifecycle resync"
                } else {
                    "lifecycle"
                };
                tracing::warn!(rayjob = %key, "{what}: {e}");
            }
            (key, resynced)
        }));
    }

    /// RayJobs with work being handled.
    fn running(&self) -> usize {
        self.running.len()
    }

    /// Waits for one piece of work to be handled, then starts the next one of its
    /// RayJob; `None` when nothing is being handled.
    async fn next_done(&mut self) -> Option<()> {
        let (key, resynced) = self.running.next().await?;
        if resynced {
            self.round.item_done();
        }
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
    /// A resync round's list: every RayJob of this installation (a LIST, not the
    /// watch) with its job, looked at afterwards as the controller has room; then
    /// NetworkPolicies left without their job are swept (a failure there is logged:
    /// the RayJobs are still looked at).
    async fn resync_list(&self) -> Result<Listed, JobError> {
        let all = self.cluster.rayjobs.list_own().await?;
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
