//! The dispatcher: the one place RayJobs are created.
//!
//! A pass reads the durable queue (oldest first) and the live capacity caches, then for
//! each queued job asks the policy chain again against the current snapshot and usage
//! (holds lift when capacity or usage changes; a policy may now reject) — reusing the
//! last decision when the policy, the view and the team's usage are what it was made
//! from (`decision_memo.rs`) — and, for an admitted job, checks the gang fit (every machine of every pool on a node of its
//! series, after subtracting what earlier jobs in this pass and dispatched-but-unbound
//! jobs take). Jobs that fit are dispatched in queue order per series; a job that does
//! not fit keeps its place, and a younger job that does fit may go (the oldest job that
//! *fits* goes first). A job's create starts as soon as it is admitted and placed,
//! while the pass decides the rest of the queue (at most `CREATE_CONCURRENCY` at once).
//!
//! Dispatch persists the intent first (queued → dispatched with the RayJob name and
//! placement), then creates the RayJob. The name is deterministic from the job id, so a
//! retry or a restart never creates a second one: AlreadyExists is adopted. A failed
//! create puts the job back in the queue.
//!
//! Passes run on every submission, every Node/Pod change (debounced) and every few
//! seconds; many wake-ups coalesce into one pass.
//!
//! Only the leader runs it, on a [`Jobs`] bound to its term: the dispatch intent is a
//! fenced write, and the RayJob create is checked against the term right before it is
//! sent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_policy_host::model::{ClusterView, Decision, Placement, SeriesUsage};
use futures::{SinkExt, StreamExt};
use tokio::sync::watch;

use super::decision_memo::Remembered;
use super::error::JobError;
use super::feed::JobEvent;
use super::fit::{PoolDemand, Rooms};
use super::queue::{self, Ledger, QueueEntry};
use super::service::Jobs;
use crate::admission::{self, Path};
use crate::cluster::Created;
use crate::cluster::api_error::{self, Failure};
use crate::cluster::labels::HEAD_GROUP;
use crate::config::Config;
use crate::domain::JobState;
use crate::rayjob::{self, CapsuleRef, JobView};
use crate::store::{JobRecord, NewDecision, StoreError, Transition};

/// Longest a presigned capsule URL may live (S3's SigV4 limit).
const MAX_URL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How many RayJob creates run at once.
const CREATE_CONCURRENCY: usize = 32;
/// Minimum gap between two passes triggered by cluster changes.
const DEBOUNCE: Duration = Duration::from_millis(25);
/// A pass runs at least this often.
const IDLE_PASS: Duration = Duration::from_secs(5);

/// Runs the dispatcher until the task is aborted (the leader's controllers run it
/// on a [`Jobs`] bound to their term). Its first pass waits for the capacity caches:
/// an empty cluster view would fit nothing.
pub fn spawn(jobs: Jobs, mut stopping: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            () = jobs.cluster.capacity.synced() => {}
            () = stopped(&mut stopping) => return,
        }
        let mut changes = jobs.cluster.capacity.changes();
        // Jobs other replicas queue (PostgreSQL notifications), if the store tells.
        let mut remote = jobs.store.queue_changes();
        // A pass is never cut short by `stopping`: the dispatches it started (stored
        // intent, then the RayJob create) finish; the loop ends at the next pause.
        while !stop_asked(&stopping) {
            let started = Instant::now();
            match jobs.dispatch_pass().await {
                Ok(_) => {}
                Err(e) => tracing::warn!("dispatcher pass failed (retrying): {e}"),
            }
            jobs.metrics.dispatch_pass(started.elapsed());
            tokio::select! {
                () = jobs.queue.woken() => {}
                r = changes.changed() => {
                    if r.is_err() {
                        // The capacity caches are gone (shutdown): poll slowly.
                        tokio::time::sleep(IDLE_PASS).await;
                    }
                    tokio::time::sleep(DEBOUNCE).await;
                }
                r = async {
                    match remote.as_mut() {
                        Some(feed) => feed.changed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if r.is_err() {
                        remote = None;
                    }
                }
                () = tokio::time::sleep(IDLE_PASS) => {}
                () = stopped(&mut stopping) => {}
            }
        }
        tracing::info!("dispatcher stopped");
    })
}

/// Resolves once a stop is asked (or nobody can ask any more).
pub(crate) async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

/// Whether a stop was asked, or nobody can ask any more (the sender is gone: the
/// controllers that owned it were dropped). Without the second half the loop would
/// spin, since [`stopped`] resolves at once on a closed channel.
fn stop_asked(stopping: &watch::Receiver<bool>) -> bool {
    *stopping.borrow() || stopping.has_changed().is_err()
}

/// What each pool of a job needs, placed by `placement` (or as the spec asks): its
/// series, machines with their GPUs, CPU and memory, and where its pods may go (the
/// placement's node selector and affinity, the configured tolerations plus the
/// placement's).
pub fn demands(job: &JobRecord, placement: Option<&Placement>, cfg: &Config) -> Vec<PoolDemand> {
    job.spec
        .pools
        .iter()
        .enumerate()
        .map(|(i, pool)| {
            let placed = placement.and_then(|p| p.pools.get(i));
            let series = placed
                .and_then(|p| p.series.clone())
                .or_else(|| pool.series.clone())
                .or_else(|| job.queue_series.clone())
                .unwrap_or_else(|| "unplaced".to_string());
            let (cpu_millis, memory_bytes) = rayjob::cpu_and_memory(pool, &series, cfg);
            let mut tolerations = cfg.pods.tolerations.clone();
            tolerations.extend(placed.map(|p| p.tolerations.clone()).unwrap_or_default());
            PoolDemand {
                nodes: pool.nodes,
                gpus_per_node: pool.gpus_per_node,
                cpu_millis,
                memory_bytes,
                node_selector: placed.map(|p| p.node_selector.clone()).unwrap_or_default(),
                tolerations,
                affinity: placed.map(|p| p.affinity.clone()).unwrap_or_default(),
                series,
            }
        })
        .collect()
}

/// The GPUs each pool of a job takes, and on which series (as [`demands`] places
/// them, without the rest of a demand).
fn series_gpus<'a>(
    job: &'a JobRecord,
    placement: Option<&'a Placement>,
) -> impl Iterator<Item = (&'a str, u64)> + 'a {
    job.spec.pools.iter().enumerate().map(move |(i, pool)| {
        let series = placement
            .and_then(|p| p.pools.get(i))
            .and_then(|p| p.series.as_deref())
            .or(pool.series.as_deref())
            .or(job.queue_series.as_deref())
            .unwrap_or("unplaced");
        (
            series,
            u64::from(pool.nodes) * u64::from(pool.gpus_per_node),
        )
    })
}

/// GPUs per team and series: active jobs as running (where they were placed), queued
/// jobs as queued (as they ask).
pub fn ledger_of<J: std::borrow::Borrow<JobRecord>>(
    active: &[J],
    queued: &[J],
    _cfg: &Config,
) -> Ledger {
    let mut ledger = Ledger::new();
    for job in active {
        let job = job.borrow();
        for (series, gpus) in series_gpus(job, job.placement.as_ref()) {
            queue::add(&mut ledger, &job.team, series, gpus, true);
        }
    }
    for job in queued {
        let job = job.borrow();
        for (series, gpus) in series_gpus(job, None) {
            queue::add(&mut ledger, &job.team, series, gpus, false);
        }
    }
    ledger
}

/// The machines of a dispatched job the scheduler has not bound yet, per pool
/// (`bound` counts its bound pods per KubeRay group; the head is the primary pool's).
fn unbound(
    job: &JobRecord,
    demand: &PoolDemand,
    pool_index: usize,
    bound: &BTreeMap<(String, String), u32>,
) -> u32 {
    let pool = &job.spec.pools[pool_index].name;
    let of = |group: &str| {
        bound
            .get(&(job.id.clone(), group.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let mut placed = of(pool);
    if pool_index == 0 {
        placed += of(HEAD_GROUP);
    }
    demand.nodes.saturating_sub(placed)
}

/// The cluster view with the pass's reservations applied (`totals` from
/// [`Rooms::totals`] of the pass's free map).
fn adjusted(mut view: ClusterView, totals: &BTreeMap<String, (u32, u32)>) -> ClusterView {
    for s in &mut view.series {
        let (f, largest) = totals.get(&s.series).copied().unwrap_or((0, 0));
        s.free = f;
        s.largest_free_block = largest;
        s.in_use = s.allocatable.saturating_sub(f);
    }
    view
}

/// Counts `job`, which keeps waiting, as queued ahead of its team's later jobs.
fn add_ahead<'a>(
    ahead: &mut rustc_hash::FxHashMap<&'a str, BTreeMap<&'a str, u32>>,
    job: &'a JobRecord,
) {
    let mine = ahead.entry(job.team.as_str()).or_default();
    for (series, gpus) in series_gpus(job, None) {
        let g = mine.entry(series).or_default();
        *g = g.saturating_add(u32::try_from(gpus).unwrap_or(u32::MAX));
    }
}

/// A team's usage as a queued job's request carries it: GPUs its active jobs (and
/// the jobs this pass dispatched) hold, and `ahead`, what its jobs queued ahead of
/// this one want, per series.
fn usage_ahead(
    ledger: &queue::Ledger,
    team: &str,
    ahead: Option<&BTreeMap<&str, u32>>,
) -> Vec<SeriesUsage> {
    let mut by_series: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for (series, (running, _)) in ledger.get(team).into_iter().flatten() {
        if *running > 0 {
            by_series.entry(series).or_default().0 = *running;
        }
    }
    for (series, queued) in ahead.into_iter().flatten() {
        by_series.entry(*series).or_default().1 = *queued;
    }
    by_series
        .into_iter()
        .map(|(series, (running, queued))| SeriesUsage {
            series: series.to_string(),
            running,
            queued,
        })
        .collect()
}

/// Where queued jobs stand after a pass, per series in queue order.
#[derive(Default)]
struct Standing {
    entries: queue::Standings,
    positions: rustc_hash::FxHashMap<String, u32>,
}

impl Standing {
    /// Records that a job keeps waiting in its series' queue (next position, with why).
    fn waits(&mut self, job_id: &str, series: String, code: &str, reason: String) {
        let p = match self.positions.get_mut(series.as_str()) {
            Some(p) => p,
            None => self.positions.entry(series.clone()).or_default(),
        };
        *p += 1;
        self.entries.insert(
            job_id.to_string(),
            QueueEntry {
                series,
                position: *p,
                code: code.to_string(),
                reason,
            },
        );
    }
}

impl Jobs {
    /// Publishes the dispatcher's queue view, and a standing event for each queued
    /// job whose place or reason changed (`teams`: job id → team).
    pub(crate) fn publish_queue(
        &self,
        entries: queue::Standings,
        ledger: Ledger,
        teams: &rustc_hash::FxHashMap<&str, &str>,
    ) {
        let before = self.queue.snapshot();
        let changed: Vec<(String, QueueEntry)> = entries
            .iter()
            .filter(|(id, e)| before.get(*id) != Some(*e))
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect();
        self.queue.publish(entries, ledger);
        for (job_id, queue) in changed {
            let team = teams
                .get(job_id.as_str())
                .map(|t| (*t).to_string())
                .unwrap_or_default();
            self.feed.publish(JobEvent::Standing {
                job_id,
                team,
                queue,
            });
        }
    }

    /// One pass over the queue; returns how many jobs were dispatched.
    pub async fn dispatch_pass(&self) -> Result<usize, JobError> {
        let started = Instant::now();
        let unfinished = self.records.unfinished(self.store.as_ref()).await?;
        let (listed, records_read) = (unfinished.listed, unfinished.read);
        let (queued, active) = (unfinished.queued, unfinished.active);

        // GPUs already promised: active jobs count as running for their team, and their
        // machines not yet bound to nodes are reserved out of the rooms.
        let capacity = &self.cluster.capacity;
        let cfg = &self.config;
        let mut free = Rooms::new(capacity.rooms());
        let bound = capacity.bound_machines();
        let mut ledger = ledger_of(&active, &queued, cfg);
        for job in &active {
            for (i, d) in demands(job, job.placement.as_ref(), cfg)
                .into_iter()
                .enumerate()
            {
                let pending = PoolDemand {
                    nodes: unbound(job, &d, i, &bound),
                    ..d
                };
                free.reserve_partially(&pending);
            }
        }
        if queued.is_empty() {
            self.publish_queue(Default::default(), ledger, &Default::default());
            self.decisions.keep(Default::default());
            return Ok(0);
        }

        let read = started.elapsed();
        let snapshot = capacity.snapshot();
        let mut standing = Standing::default();
        let tolerations = &cfg.pods.tolerations;
        // The view as the requests carry it: rebuilt only when a reservation in this
        // pass changes it.
        let mut view = Arc::new(adjusted(snapshot.clone(), &free.totals(tolerations)));
        // GPUs of each team's jobs still queued ahead of the one being decided: what its
        // request's `usage.queued` counts (at submission, a job's is every queued job of
        // its team; here it is the same, the ones ahead of it), so a job submitted later
        // changes nothing for the jobs before it.
        let mut ahead: rustc_hash::FxHashMap<&str, BTreeMap<&str, u32>> = Default::default();
        let generation = self.admission.policy_generation();
        let mut remembered = self.decisions.take();
        let mut kept = super::decision_memo::Table::default();
        kept.reserve(queued.len());
        let mut reused = 0u64;
        // Creates start as soon as a job is admitted and placed, while the rest of the
        // queue is still being decided: the decisions wait on the evaluation pool, the
        // creates on the store and the API server.
        let (mut to_dispatch, admitted) =
            futures::channel::mpsc::channel::<(Arc<JobRecord>, Placement, NewDecision)>(
                CREATE_CONCURRENCY,
            );
        let creates = admitted
            .map(|(job, placement, decision)| async move {
                let id = job.id.clone();
                match self.dispatch(&job, placement, Some(decision)).await {
                    Ok(created) => created,
                    Err(e) => {
                        tracing::warn!(job = %id, "dispatch failed: {e}");
                        false
                    }
                }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .filter(|created| std::future::ready(*created))
            .count();
        let decide = async {
            for job in &queued {
                let usage = Arc::new(self.admission.usage_with_playgrounds(
                    &job.team,
                    usage_ahead(&ledger, &job.team, ahead.get(job.team.as_str())),
                ));
                let request = |view: &ClusterView| {
                    self.admission.request_with_full_usage(
                        &job.id,
                        &job.team,
                        &job.spec,
                        view.clone(),
                        (*usage).clone(),
                    )
                };
                let (key, memo) = match remembered.remove_entry(&job.id) {
                    Some((k, r)) => (k, Some(r)),
                    None => (job.id.clone(), None),
                };
                let evaluated = match memo {
                    Some(r) if r.holds(generation, &view, &usage) => {
                        reused += 1;
                        r.evaluated
                    }
                    _ => match self
                        .admission
                        .evaluate(&job.team, request(&view), Path::Queue)
                        .await
                    {
                        Ok(e) => e,
                        Err(e) => {
                            // Fail closed: the job keeps waiting, with the failure as its reason.
                            let series = admission::primary_series(&job.spec, None);
                            let reason = format!("the admission policy failed: {e}");
                            standing.waits(&job.id, series, "policy.failed", reason);
                            add_ahead(&mut ahead, job);
                            continue;
                        }
                    },
                };
                // The request is rebuilt only to be recorded with a decision that is
                // stored (a dispatch or a rejection); it is the one the decision was made on.
                let record = |evaluated: &crate::policy::Evaluated, view: &ClusterView| {
                    admission::decision_record(
                        &job.id,
                        &job.team,
                        &evaluated.outcome,
                        &evaluated.label,
                        Some(&request(view)),
                    )
                };
                let series =
                    admission::primary_series(&job.spec, Some(&evaluated.outcome.decision));
                let keep = Remembered {
                    view: view.clone(),
                    usage: usage.clone(),
                    evaluated,
                };
                match &keep.evaluated.outcome.decision {
                    Decision::Reject { code, message, .. } => {
                        let reason = format!("{code}: {message}");
                        let mut t = Transition::new(
                            &job.id,
                            JobState::Queued,
                            JobState::Rejected,
                            Some(reason),
                        );
                        t.decision = Some(record(&keep.evaluated, &view));
                        if let Err(e) = self.transition(t).await {
                            tracing::warn!(job = %job.id, "recording a rejection: {e}");
                        }
                    }
                    Decision::Queue { code, message } => {
                        standing.waits(&job.id, series, code, message.clone());
                        add_ahead(&mut ahead, job);
                        kept.insert(key, keep);
                    }
                    Decision::Admit { placement } => {
                        let wanted = demands(job, Some(placement), cfg);
                        match free.reserve(&wanted) {
                            Ok(()) => {
                                let d = record(&keep.evaluated, &view);
                                for d in &wanted {
                                    queue::add(&mut ledger, &job.team, &d.series, d.gpus(), true);
                                }
                                // What this job takes changes the view (and its team's
                                // usage) for every job after it.
                                view =
                                    Arc::new(adjusted(snapshot.clone(), &free.totals(tolerations)));
                                // The receiver lives as long as this loop: a send fails only
                                // if the pass is being dropped.
                                let _ = to_dispatch.send((job.clone(), placement.clone(), d)).await;
                            }
                            Err(nofit) => {
                                standing.waits(&job.id, series, nofit.code(), nofit.to_string());
                                add_ahead(&mut ahead, job);
                                kept.insert(key, keep);
                            }
                        }
                    }
                }
            }
            // Closing the channel ends the creates once the last admitted job is sent.
            drop(to_dispatch);
            let decided = started.elapsed();
            self.decisions.keep(kept);
            self.metrics.dispatch_decisions_reused(reused);
            let teams: rustc_hash::FxHashMap<&str, &str> = queued
                .iter()
                .map(|j| (j.id.as_str(), j.team.as_str()))
                .collect();
            self.publish_queue(standing.entries, ledger, &teams);
            decided
        };
        let (decided, dispatched) = tokio::join!(decide, creates);
        // Where a pass's time goes: reading the queue, deciding it (creates run meanwhile),
        // the creates still running after the last decision.
        tracing::debug!(
            queued = queued.len(),
            listed,
            records_read,
            reused,
            dispatched,
            read_ms = read.as_millis(),
            decide_ms = (decided - read).as_millis(),
            creates_after_ms = (started.elapsed() - decided).as_millis(),
            "dispatcher pass"
        );
        Ok(dispatched)
    }

    /// The capsule as the RayJob references it.
    ///
    /// Pods fetch straight from the object store whenever that URL outlives the job,
    /// so a pod that starts while the gateway is down still gets its code:
    /// - plain-HTTP storage (the init container fetches and verifies): the store's URL
    ///   first, and the job's capsule link as the fallback when that fails — a pod
    ///   recreated after the presigned URL expired (at most 7 days) gets a fresh one
    ///   from the gateway;
    /// - `https` storage, which Ray fetches itself from one URL: the store's URL when
    ///   the job's deadlines end before it expires, else the capsule link (valid until
    ///   the job ends, however long; it needs an `https` gateway URL, since Ray
    ///   fetches only `https`). Without a link (no URL pods reach the gateway at, or
    ///   an `http` one) such a job's URL expires after 7 days.
    async fn capsule_ref(&self, job: &JobRecord) -> Result<CapsuleRef, JobError> {
        let digest = job
            .capsule_sha256
            .clone()
            .ok_or_else(|| JobError::Invariant(format!("job {} has no capsule", job.id)))?;
        let cfg = &self.config;
        let pre = super::pre_running::deadline_s(&job.spec, cfg);
        let active = job.spec.deadlines.active_seconds;
        let lifetime = pre
            .saturating_add(active.unwrap_or(24 * 3600))
            .saturating_add(3600);
        let lifetime = Duration::from_secs(u64::try_from(lifetime).unwrap_or(0));
        let direct = self
            .objects
            .get_url(digest.as_str(), lifetime.min(MAX_URL_TTL))
            .await?;
        let link = self.links.as_ref().map(|l| l.link(&job.id, &digest));
        if direct.scheme() == "http" {
            let init = forge_capsule::init_container(
                &direct,
                digest.as_str(),
                Some(&cfg.gateway.capsule_init_image),
            )
            .map_err(|e| JobError::io("capsule init container", e))?;
            let init = match &link {
                Some(link) => init.with_fallback(link),
                None => init,
            };
            return Ok(CapsuleRef {
                digest,
                working_dir_url: direct.to_string(),
                init: Some(init),
            });
        }
        let outlives = active.is_some() && lifetime <= MAX_URL_TTL;
        let url = match link {
            Some(link) if !outlives && link.scheme() == "https" => link,
            _ => direct,
        };
        Ok(CapsuleRef {
            digest,
            working_dir_url: url.to_string(),
            init: None,
        })
    }

    /// Dispatches one job: persists the intent, then creates (or adopts) its RayJob.
    /// Returns whether the job was dispatched (false when it was cancelled meanwhile,
    /// or is being dispatched by another pass of this process).
    /// `decision` (the admission that placed it) is stored with the dispatch.
    async fn dispatch(
        &self,
        job: &JobRecord,
        placement: Placement,
        decision: Option<NewDecision>,
    ) -> Result<bool, JobError> {
        let started = Instant::now();
        let capsule = self.capsule_ref(job).await?;
        let view = JobView {
            id: &job.id,
            team: &job.team,
            spec: &job.spec,
            instance: self.cluster.rayjobs.instance(),
        };
        let manifest = match rayjob::build_rayjob(&view, &placement, &capsule, &self.config) {
            Ok(m) => m,
            Err(e) => {
                // The job cannot run as placed: fail it rather than retry forever.
                let t = Transition::new(
                    &job.id,
                    JobState::Queued,
                    JobState::Failed,
                    Some(format!("dispatch.invalid: {e}")),
                );
                self.transition(t).await?;
                return Err(e.into());
            }
        };
        let name = rayjob::rayjob_name(&job.id);
        // In flight from before the intent is stored until the create returns: the
        // lifecycle controller's reconcile leaves the job to this create meanwhile. A
        // job already claimed is being dispatched here by another pass: leave it to it.
        let Some(_in_flight) = self.creating.try_claim(&job.id) else {
            return Ok(false);
        };
        let mut t = Transition::new(
            &job.id,
            JobState::Queued,
            JobState::Dispatched,
            Some(format!("RayJob {name} created")),
        );
        t.rayjob_name = Some(name.clone());
        t.placement = Some(placement);
        t.decision = decision;
        match self.transition(t).await {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        // The intent is stored under this term; the create goes out only while the term
        // lasts (a deposed leader's stored intent is reconciled by its successor).
        self.may_act("create")?;
        self.metrics.rayjob_write("create");
        // The NetworkPolicy first, so the RayJob's pods are never reachable by others.
        let policy = rayjob::network::network_policy(
            &job.id,
            &job.team,
            self.cluster.rayjobs.instance(),
            &self.config,
        );
        let created = match self.cluster.network_policies.create_or_adopt(&policy).await {
            Ok(_) => self.cluster.rayjobs.create_or_adopt(&manifest).await,
            Err(e) => Err(e),
        };
        match created {
            Ok(Created::New) => {}
            Ok(Created::Adopted) => {
                tracing::info!(job = %job.id, rayjob = %name, "RayJob exists: adopted");
            }
            Err(e) if api_error::classify(&e) == Failure::Refused => {
                // The API server refused this RayJob (invalid, too large, forbidden):
                // the same request would be refused again, so the job fails with the
                // server's message instead of holding its GPUs in every pass.
                let t = Transition::new(
                    &job.id,
                    JobState::Dispatched,
                    JobState::Failed,
                    Some(format!(
                        "dispatch.refused: the Kubernetes API server refused the RayJob: {}",
                        api_error::message(&e)
                    )),
                );
                if let Err(e2) = self.transition(t).await {
                    tracing::warn!(job = %job.id, "failing a refused job: {e2}");
                }
                return Err(e.into());
            }
            Err(e) => {
                let t = Transition::new(
                    &job.id,
                    JobState::Dispatched,
                    JobState::Queued,
                    Some(format!(
                        "dispatch.retry: creating the RayJob failed ({e}); will retry"
                    )),
                );
                if let Err(e2) = self.transition(t).await {
                    tracing::warn!(job = %job.id, "re-queueing after a failed create: {e2}");
                }
                return Err(e.into());
            }
        }
        self.metrics.dispatched(started.elapsed());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_asked_by_setting_it_or_by_dropping_the_sender() {
        let (tx, rx) = watch::channel(false);
        assert!(!stop_asked(&rx));
        tx.send(true).expect("receiver alive");
        assert!(stop_asked(&rx));

        let (tx, rx) = watch::channel(false);
        drop(tx);
        assert!(
            stop_asked(&rx),
            "a dropped sender must end the loop, not spin it"
        );
    }
}
