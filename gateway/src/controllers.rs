//! The background work beside the HTTP server, and who runs what:
//!
//! - on **every replica**: the elector ([`crate::leader::elector`]), the policy sync
//!   (other replicas' policy changes: notifications where the store has them, polling
//!   always), and the foreign-RayJob scan ([`crate::jobs::lifecycle::orphans`]);
//! - on **the leader only**, for exactly the length of its term: the dispatcher and the
//!   lifecycle controller, bound to the term (fenced), the
//!   playground TTL controller ([`crate::playground::reclaim`]) and the retention
//!   sweeper ([`crate::retention`]);
//! - on **followers**: the queue board refreshed from the store
//!   ([`crate::jobs::dispatch::follower`]), so queue standings and usage are right everywhere.
//!
//! A supervisor follows the role: when a term starts it starts the leader's loops with
//! that term; when the term ends (lost, deadline passed) it aborts them at once — and
//! whatever of them is still in flight is refused by the fence.
//!
//! A clean shutdown (SIGTERM, as in a rolling update) is gentler than a lost term: the
//! dispatcher is asked to stop and finishes the dispatches it has started (each one is
//! a stored intent followed by its RayJob create), within [`DRAIN`]; only then is
//! everything aborted and the lease released. Aborting between the intent and the
//! create would be safe (the successor finds the intent without a RayJob and queues the
//! job again) but would admit and dispatch that job a second time for nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::jobs::{self, Jobs};
use crate::leader::{Leadership, Role, elector};
use crate::playground::{Playgrounds, reclaim};
use crate::retention::{self, Periods, Retention};
use crate::state::AppState;

/// Tasks aborted when dropped.
#[derive(Default)]
struct Running(Vec<tokio::task::JoinHandle<()>>);

impl Running {
    /// Aborts what runs and runs `next` instead.
    fn replace(&mut self, next: Vec<tokio::task::JoinHandle<()>>) {
        for t in self.0.drain(..) {
            t.abort();
        }
        self.0 = next;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.replace(Vec::new());
    }
}

/// How long a clean shutdown waits for the dispatcher to finish what it started.
const DRAIN: Duration = Duration::from_secs(10);

/// The background controllers; aborted when dropped.
pub struct Controllers {
    tasks: Running,
    /// The supervisor of the leader's and followers' loops (drained first).
    supervisor: Option<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    leadership: Arc<Leadership>,
}

impl Controllers {
    /// Lets the dispatcher finish the dispatches it has started (within [`DRAIN`]),
    /// stops everything else, waits for the tasks to end, then releases the leader lease
    /// (if held) so another replica takes over without waiting for it to expire.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(mut supervisor) = self.supervisor.take()
            && tokio::time::timeout(DRAIN, &mut supervisor).await.is_err()
        {
            tracing::warn!(
                "the dispatcher did not finish within {DRAIN:?}: stopping it; its \
                 unfinished dispatches are queued again by the next leader"
            );
            supervisor.abort();
            let _ = supervisor.await;
        }
        let tasks = std::mem::take(&mut self.tasks.0);
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        self.leadership.release().await;
    }
}

/// Starts the elector, the supervisor of the leader's and followers' loops, the policy
/// sync, the foreign-RayJob scan, the sweeper of this replica's abandoned uploads
/// (upload sessions live on the replica that holds them) and the tokens file watch.
pub fn spawn_controllers(state: &AppState) -> Controllers {
    let sync = Duration::from_millis(state.config.gateway.policy_sync_ms);
    let (stop, stopping) = watch::channel(false);
    let retention = Retention::new(
        Periods::from_config(&state.config.gateway),
        state.database.retention.clone(),
        state.jobs.objects.clone(),
        state.metrics.clone(),
    );
    let supervisor = supervise(
        state.jobs.clone(),
        state.playgrounds.clone(),
        retention,
        state.leadership.clone(),
        stopping,
    );
    let mut tasks = vec![
        elector::spawn(state.leadership.clone()),
        state.policies.spawn_sync(sync),
        jobs::lifecycle::orphans::spawn(state.jobs.lifecycle.clone()),
        state.uploads.spawn_sweeper(),
    ];
    tasks.extend(state.tokens.spawn_watch());
    Controllers {
        tasks: Running(tasks),
        supervisor: Some(supervisor),
        stop,
        leadership: state.leadership.clone(),
    }
}

/// Runs the leader's loops during each term, the follower's otherwise. When `stopping`
/// turns true it waits for the dispatcher to end (it stops at its next pause), aborts
/// the rest and returns.
fn supervise(
    jobs: Jobs,
    playgrounds: Playgrounds,
    retention: Retention,
    leadership: Arc<Leadership>,
    mut stopping: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut roles = leadership.subscribe();
        let mut running = Running::default();
        // The leader's dispatcher, awaited (not aborted) at shutdown.
        let mut dispatcher: Option<tokio::task::JoinHandle<()>> = None;
        let mut now: Option<Role> = None;
        loop {
            let role = roles.borrow_and_update().clone();
            let started = match (&role, &now) {
                (Role::Leader { epoch }, Some(Role::Leader { epoch: was })) if epoch == was => {
                    false
                }
                (Role::Follower { .. }, Some(Role::Follower { .. })) => false,
                _ => true,
            };
            if started {
                match (&role, leadership.term()) {
                    (Role::Leader { epoch }, Some(term)) if term.epoch() == *epoch => {
                        tracing::info!(
                            epoch,
                            "leading: dispatcher and lifecycle controller started"
                        );
                        if let Some(old) = dispatcher.take() {
                            old.abort();
                        }
                        dispatcher = Some(jobs::dispatch::spawn(
                            jobs.dispatcher.for_term(term.clone()),
                            stopping.clone(),
                        ));
                        // One lifecycle controller per fleet, each following its
                        // cluster's RayJobs.
                        let lifecycle = jobs.lifecycle.for_term(term.clone());
                        let mut tasks: Vec<_> = lifecycle
                            .fleets()
                            .iter()
                            .map(|fleet| jobs::lifecycle::spawn(lifecycle.following(fleet)))
                            .collect();
                        tasks.extend([
                            jobs::lifecycle::release::spawn(lifecycle),
                            reclaim::spawn(playgrounds.clone(), term.clone()),
                            retention::spawn(retention.clone(), term),
                        ]);
                        running.replace(tasks);
                    }
                    _ => {
                        if matches!(now, Some(Role::Leader { .. })) {
                            tracing::warn!(
                                "leadership ended: dispatcher and lifecycle controller stopped"
                            );
                        }
                        if let Some(old) = dispatcher.take() {
                            old.abort();
                        }
                        running.replace(vec![jobs::dispatch::follower::spawn(
                            jobs.dispatcher.clone(),
                        )]);
                    }
                }
                now = Some(role);
            }
            tokio::select! {
                changed = roles.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                () = jobs::dispatch::stopped(&mut stopping) => break,
            }
        }
        if let Some(d) = dispatcher.take() {
            // Dropping the handle would detach it; awaiting lets it finish its pass.
            let _ = d.await;
        }
        drop(running);
    })
}
