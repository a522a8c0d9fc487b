//! The dispatcher: the one place RayJobs are created.
//!
//! A pass reads the durable queue (oldest first) and the live capacity caches, then for
//! each queued job asks the policy chain again against the current snapshot and usage
//! (holds lift when capacity or usage changes; a policy may now reject) — reusing the
//! last decision when the policy, the view and the team's usage are what it was made
//! from (`decision_memo.rs`) — and, for an admitted job, checks the gang fit (every machine of every pool on a node of its
//! series, after subtracting what earlier jobs in this pass and dispatched-but-unbound
//! jobs take). The queue is decided in fair order (`fair_order.rs`): priority, then the
//! team with the lowest share of the series (`fair_share.rs`: decayed usage plus what
//! it holds), then submission order; a job that does not fit keeps its place, and a
//! later job that does fit may go. A job's create starts as soon as it is admitted and placed,
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
//! Only the leader runs it, on a core bound to its term ([`Dispatcher::for_term`]): the
//! dispatch intent is a fenced write, and the RayJob create is checked against the term
//! right before it is sent.
//!
//! The files: this one is the service and its loop; `pass.rs` one pass (its steps:
//! reserve, decide, create); `demand.rs` what a job asks of the cluster and how a
//! team's usage is counted; `create.rs` one job's dispatch (the stored intent, then the
//! RayJob); `decision_memo.rs` the decisions a pass may reuse; `fair_share.rs` and
//! `fair_order.rs` the order a pass decides the queue in; `preempt.rs` preemption,
//! and `book.rs` what a pass knows of recent preemptions;
//! `journal.rs` what a dispatching pass records for the dispatch journal, and
//! `replay.rs` the journal ordered again (`POST /v1/fair-share/replay`); `quiet.rs`
//! the passes that need not run because nothing they decide from moved.

mod book;
mod create;
pub mod decision_memo;
pub mod demand;
mod fair_order;
pub mod fair_share;
pub mod follower;
mod journal;
mod pass;
pub mod preempt;
mod quiet;
pub mod replay;
mod standing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::claims::Claims;
use super::core::JobCore;
use super::feed::JobEvent;
use super::pod_links::PodLinks;
use super::queue::{QueueEntry, Standings};
use super::records::RecordCache;
use crate::admission::Admission;
use crate::admission::usage::Ledger;
use crate::cluster::Fleets;
use crate::objects::ObjectStore;

pub use demand::{demands, ledger_of};

/// How many RayJob creates run at once.
const CREATE_CONCURRENCY: usize = 32;
/// Minimum gap between two passes triggered by cluster changes.
const DEBOUNCE: Duration = Duration::from_millis(25);
/// A pass runs at least this often.
const IDLE_PASS: Duration = Duration::from_secs(5);

/// The dispatch service.
#[derive(Clone)]
pub struct Dispatcher {
    core: JobCore,
    admission: Admission,
    /// The fleets jobs are created in (a job's in the one its gang fit chose).
    fleets: Fleets,
    objects: Arc<dyn ObjectStore>,
    /// Capsule links for `working_dir` and the job's API access (`pod_links.rs`), if
    /// the gateway hands them out.
    pub(crate) links: Option<Arc<PodLinks>>,
    /// The decisions a pass may reuse (`decision_memo.rs`).
    decisions: Arc<decision_memo::DecisionMemo>,
    /// The unfinished jobs' records, read only as they change (`records.rs`).
    records: Arc<RecordCache>,
    /// Dispatches whose RayJob create is in flight here (`claims.rs`).
    creating: Arc<Claims>,
    /// The usage ledger as this term's leader keeps it (`fair_share.rs`).
    fair: Arc<fair_share::FairShare>,
    /// The last settled pass, which an unchanged next one need not repeat (`quiet.rs`).
    quiet: Arc<quiet::QuietPasses>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dispatcher")
    }
}

impl Dispatcher {
    pub fn new(
        core: JobCore,
        admission: Admission,
        fleets: Fleets,
        objects: Arc<dyn ObjectStore>,
        links: Option<Arc<PodLinks>>,
        records: Arc<RecordCache>,
        creating: Arc<Claims>,
    ) -> Self {
        let fair = Arc::new(fair_share::FairShare::new(
            core.config.gateway.fair_share_half_life_s,
        ));
        Dispatcher {
            core,
            fair,
            admission,
            fleets,
            objects,
            links,
            decisions: Arc::default(),
            records,
            creating,
            quiet: Arc::default(),
        }
    }

    /// The same dispatcher, its writes fenced with `term` (the leader's).
    pub fn for_term(&self, term: crate::leader::Term) -> Dispatcher {
        Dispatcher {
            core: self.core.for_term(term),
            // Each term reads the ledger afresh: another leader may have written it.
            fair: Arc::new(fair_share::FairShare::new(
                self.core.config.gateway.fair_share_half_life_s,
            )),
            quiet: Arc::default(),
            ..self.clone()
        }
    }

    /// Publishes the queue's standings and the teams' usage (to admission), and a
    /// standing event for each queued job whose place or reason changed (`teams`: job
    /// id → team).
    fn publish(
        &self,
        entries: Standings,
        ledger: Ledger,
        teams: &rustc_hash::FxHashMap<&str, &str>,
    ) {
        let before = self.core.queue.snapshot();
        let changed: Vec<(String, QueueEntry)> = entries
            .iter()
            .filter(|(id, e)| before.get(*id) != Some(*e))
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect();
        self.core.queue.publish(entries);
        self.admission.usage().publish(ledger);
        for (job_id, queue) in changed {
            let team = teams
                .get(job_id.as_str())
                .map(|t| (*t).to_string())
                .unwrap_or_default();
            self.core.feed.publish(JobEvent::Standing {
                job_id,
                team,
                queue,
            });
        }
    }
}

/// Runs the dispatcher until the task is aborted (the leader's controllers run it
/// bound to their term). Its first pass waits for the capacity caches:
/// an empty cluster view would fit nothing.
pub fn spawn(jobs: Dispatcher, mut stopping: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            () = jobs.fleets.capacity().synced() => {}
            () = stopped(&mut stopping) => return,
        }
        let mut changes = jobs.fleets.capacity().changes();
        // Jobs other replicas queue (PostgreSQL notifications), if the store tells.
        let mut remote = jobs.core.store.queue_changes();
        // A pass is never cut short by `stopping`: the dispatches it started (stored
        // intent, then the RayJob create) finish; the loop ends at the next pause.
        while !stop_asked(&stopping) {
            let started = Instant::now();
            match jobs.dispatch_pass().await {
                Ok(_) => {}
                Err(e) => tracing::warn!("dispatcher pass failed (retrying): {e}"),
            }
            jobs.core.metrics.dispatch_pass(started.elapsed());
            tokio::select! {
                () = jobs.core.queue.woken() => {}
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
