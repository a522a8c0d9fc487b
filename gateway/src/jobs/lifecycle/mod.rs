//! The lifecycle controller: follows this installation's RayJobs (a kube-runtime
//! watcher on `app.kubernetes.io/managed-by=forge-gateway` **and**
//! `forge.dev/instance=<the store's identity>`) and moves each job through
//! dispatched → initializing → running → succeeded | failed | cancelled | timed-out
//! (`kuberay_status.rs`), persisting every transition with its reason. On a
//! terminal status the job's logs are archived and its RayJob deleted at once
//! (`cleanup.rs`; the operator's TTL is only the fallback) — after its Ray job was
//! stopped and ended, when the job ended in the store first (`stop_first.rs`). A job not running by
//! its pre-running deadline is timed out here even when the operator ignores
//! `preRunningDeadlineSeconds` (`jobs::pre_running`). A failing job whose pods show an
//! OOM kill gets it in its reason (`…; Pod/<name>: container ray-worker was OOMKilled
//! (limit 8Gi)`).
//!
//! It never deletes a RayJob it cannot prove it created: one of its own identity whose
//! job the store does not know (a store restored from an old backup) is left alone and
//! reported, like RayJobs of other installations (`orphans.rs`). Only the leader
//! runs it, bound to its term ([`Lifecycle::for_term`]: fenced writes, deletes checked
//! first). A user's cancel (`cancel.rs`) runs on the unbound service.
//!
//! Events of different RayJobs are handled concurrently (at most [`CONCURRENCY`] at
//! once, each waiting on its own store write, which group commit shares); one
//! RayJob's events are handled in the order they came (`per_key.rs`). The resync
//! and the reconcile after a list leave RayJobs with events in hand to those, so one
//! event stuck on a slow API server call holds back only its own RayJob.
//!
//! Every [`RESYNC`] the gateway's RayJobs are listed again, events or not: that
//! finishes what a transient failure interrupted (archival, delete). The round runs
//! beside the watch events, not instead of them: its LIST (seconds for thousands of
//! RayJobs on a real API server) is awaited while events are handled, and what it
//! listed is looked at as the controller has room (`resync_round.rs`). After the
//! watcher's initial list (every start and every relist) the store is reconciled with
//! what exists: a dispatched job without its RayJob (the gateway died between
//! persisting the intent and creating it) goes back to the queue; a job that was
//! initializing or running and whose RayJob vanished is failed.
//!
//! What a RayJob's status means for its job is `rayjob_events.rs`.
//!
//! Why a watcher and not `kube::runtime::Controller`: the controller reconciles objects
//! that exist, while half of this job is about jobs whose RayJob does *not* exist (never
//! created, vanished), which only the store knows — so the loop is driven by the
//! watcher's list boundaries and the store, not by object keys.

mod cancel;
mod cleanup;
mod inflight;
pub mod kuberay_status;
pub mod orphans;
mod owners;
mod per_key;
mod rayjob_events;
pub mod release;
mod resync_round;
pub mod stop_first;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, watcher};

use super::claims::Claims;
use super::core::JobCore;
use super::error::JobError;
use super::logs::JobLogs;
use crate::cluster::{Cluster, Fleets, RayJob};
use crate::jobs::job_fleet::cluster_of;
use crate::objects::ObjectStore;
use crate::store::JobRecord;
use inflight::InFlight;
use per_key::PerKey;
use resync_round::ResyncRound;

pub use orphans::OrphanReport;

/// How often every RayJob of the gateway is looked at again, events or not.
const RESYNC: Duration = Duration::from_secs(10);

/// RayJobs whose watch events are handled at once (each waits on its own store
/// write); one RayJob's events are handled one after another, in order.
const CONCURRENCY: usize = 32;

/// Of those, at most this many are a resync round's RayJobs: the watch's events keep
/// the rest of the room while a round of thousands is looked at.
const RESYNC_SHARE: usize = CONCURRENCY / 2;

/// Clean-ups (archive logs, delete the RayJob) that may run at once.
const CLEANUP_PARALLEL: usize = 16;
/// Stripes of [`Lifecycle::archiving`].
const ARCHIVE_STRIPES: usize = 64;

/// The lifecycle service: the controller's RayJob handling, clean-up, cancellation and
/// the foreign-RayJob report.
#[derive(Clone)]
pub struct Lifecycle {
    core: JobCore,
    /// Every fleet: a job's objects are in the one it records.
    fleets: Fleets,
    /// The fleet whose RayJobs this controller follows (one controller per fleet:
    /// [`Lifecycle::following`]; the first for the service's own calls).
    cluster: Cluster,
    objects: Arc<dyn ObjectStore>,
    /// A job's logs (clean-up archives them).
    logs: JobLogs,
    /// Dispatches whose RayJob create is in flight here (the reconcile leaves them to
    /// it: `claims.rs`).
    creating: Arc<Claims>,
    cleanups: Arc<InFlight>,
    /// Archive-then-delete of one job runs once at a time in this process (a cancel
    /// and the controller's clean-up may ask at the same moment), by stripe of the job
    /// id.
    archiving: Arc<Vec<tokio::sync::Mutex<()>>>,
    /// Foreign RayJobs already reported (each is logged once; see `orphans.rs`).
    reported_orphans: Arc<std::sync::Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lifecycle")
    }
}

impl Lifecycle {
    pub fn new(
        core: JobCore,
        fleets: Fleets,
        objects: Arc<dyn ObjectStore>,
        creating: Arc<Claims>,
        logs: JobLogs,
    ) -> Self {
        Lifecycle {
            core,
            cluster: fleets.first().clone(),
            fleets,
            objects,
            logs,
            creating,
            cleanups: InFlight::new(CLEANUP_PARALLEL),
            archiving: Arc::new(
                (0..ARCHIVE_STRIPES)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
            ),
            reported_orphans: Arc::default(),
        }
    }

    /// The same service, its writes fenced with `term` and its deletes checked against
    /// it (the leader's controller).
    pub fn for_term(&self, term: crate::leader::Term) -> Lifecycle {
        Lifecycle {
            core: self.core.for_term(term),
            ..self.clone()
        }
    }

    /// The same service following fleet `fleet`'s RayJobs (its controller and its
    /// orphan scan).
    pub fn following(&self, fleet: &Cluster) -> Lifecycle {
        Lifecycle {
            cluster: fleet.clone(),
            ..self.clone()
        }
    }

    /// Every fleet.
    pub fn fleets(&self) -> &Fleets {
        &self.fleets
    }

    /// The cluster `job`'s objects are in.
    fn of(&self, job: &JobRecord) -> Result<&Cluster, JobError> {
        cluster_of(&self.fleets, job)
    }

    /// Whether `job` was dispatched to the fleet this controller follows (a RayJob
    /// here of a job recorded in another fleet is not that job's).
    fn follows(&self, job: &JobRecord) -> bool {
        self.fleets
            .of_job(job.fleet.as_deref())
            .is_some_and(|c| c.fleet == self.cluster.fleet)
    }
}

/// Runs the controller until the task is aborted.
///
/// Events of different RayJobs are handled concurrently ([`PerKey`]); a resync round
/// runs beside them ([`ResyncRound`]). The reconcile after a watcher list is still
/// awaited in the loop (it comes only with a list, and needs the list's names).
pub fn spawn(jobs: Lifecycle) -> tokio::task::JoinHandle<()> {
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
                    jobs.core.metrics.rayjob_relisted();
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
    jobs: &'a Lifecycle,
    keys: PerKey<Work>,
    /// Each finished future gives its RayJob and whether it was a resync round's item.
    running: FuturesUnordered<BoxFuture<'a, (String, bool)>>,
    round: ResyncRound<(RayJob, Option<Box<JobRecord>>)>,
}

impl<'a> Handling<'a> {
    fn new(jobs: &'a Lifecycle) -> Self {
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
            self.jobs.core.metrics.rayjob_resynced();
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
