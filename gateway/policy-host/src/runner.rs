//! Runs chain evaluations off the async workers, fairly between scopes.
//!
//! WebAssembly execution is CPU-bound and may run up to its deadline; it must never
//! block a tokio worker. `PolicyRunner` runs evaluations on its own threads, at most
//! `concurrency` of them (FORGE_POLICY_CONCURRENCY, sized to the pooling allocator),
//! taking queued evaluations in turn per scope (`fair_queue`).
//!
//! Every evaluation runs for a scope (a team, or an admin task such as a replay), and
//! one scope may run at most half of the threads (at least one) at once: a team
//! flooding admissions with slow plugins waits in its own line while other teams keep
//! being evaluated.
//!
//! Why its own threads and not tokio's blocking pool behind a semaphore (as before):
//! there every evaluation was a hand-off in each direction (a permit freed wakes the
//! next waiter on an async worker, which then wakes a parked blocking thread), ~25 %
//! of a review's cost in futex wake-ups and context switches. A runner thread that
//! finishes an evaluation takes the next queued one itself, so under load its threads
//! do not park.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::chain::{Chain, ChainOutcome};
use crate::error::{ChainError, PluginError};
use crate::fair_queue::FairQueue;
use crate::model::PolicyRequest;

/// Why an asynchronous evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A plugin failed; the admission fails closed.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The runner is shutting down or the evaluation panicked.
    #[error("policy runner unavailable: {0}")]
    Unavailable(String),
}

impl RunError {
    /// The plugin failure, if that is what this is.
    pub fn plugin_error(&self) -> Option<&PluginError> {
        match self {
            RunError::Chain(c) => Some(&c.source),
            RunError::Unavailable(_) => None,
        }
    }
}

/// A queued evaluation, with its answer channel inside.
type Job = Box<dyn FnOnce() + Send>;

/// Bounded, off-worker execution of chain evaluations.
#[derive(Debug, Clone)]
pub struct PolicyRunner {
    /// Closes the runner when the last clone is dropped.
    owner: Arc<Owner>,
}

/// The runner's threads stop (and its queued evaluations fail) when this is dropped.
#[derive(Debug)]
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        let left = {
            let mut state = self.0.lock();
            state.closed = true;
            state.queue.drain()
        };
        self.0.work.notify_all();
        drop(left);
    }
}

/// What the runner's threads and its callers share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when an idle thread has a job to look for (or the runner closes).
    work: Condvar,
    /// Threads the runner may start.
    concurrency: usize,
}

struct State {
    queue: FairQueue<Job>,
    /// Threads started (they live as long as the runner).
    threads: usize,
    /// Threads waiting for work.
    idle: usize,
    closed: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("threads", &self.threads)
            .field("idle", &self.idle)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Jobs run outside the lock and their panics are caught: a poisoned lock can
        // only come from a bug in this file, and the state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A runner thread: runs jobs in turn until the runner closes.
    fn work(&self) {
        let mut state = self.lock();
        loop {
            if let Some((scope, job)) = state.queue.take() {
                drop(state);
                job();
                state = self.lock();
                state.queue.done(&scope);
                continue;
            }
            if state.closed {
                state.threads -= 1;
                return;
            }
            state.idle += 1;
            state = self
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.idle -= 1;
        }
    }
}

/// The scope of evaluations that belong to no team (the unscoped [`PolicyRunner::run`]).
const UNSCOPED: &str = "";

/// What a panicking evaluation said, for the error.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl PolicyRunner {
    /// `concurrency` evaluations may run at once (FORGE_POLICY_CONCURRENCY), at most
    /// half of them (at least one) for one scope. Threads start as work needs them.
    pub fn new(concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        let share = (concurrency / 2).max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: FairQueue::new(share),
                threads: 0,
                idle: 0,
                closed: false,
            }),
            work: Condvar::new(),
            concurrency,
        });
        PolicyRunner {
            owner: Arc::new(Owner(shared)),
        }
    }

    /// Evaluations one scope may run at once.
    pub fn share(&self) -> usize {
        self.owner.0.lock().queue.share()
    }

    /// Run `f` for no particular scope (see [`PolicyRunner::run_as`]).
    pub async fn run<T, F>(&self, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.run_as(UNSCOPED, f).await
    }

    /// Run `f` for `scope` on a runner thread once its turn comes and the scope is
    /// under its share. Whatever `f` loads (e.g. the active chain) is loaded only when
    /// it runs, so a request that waited across a policy swap runs on the new chain.
    /// If the returned future is dropped before `f` starts, `f` never runs.
    pub async fn run_as<T, F>(&self, scope: &str, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            if answer.is_closed() {
                return;
            }
            let _ = answer.send(catch_unwind(AssertUnwindSafe(f)));
        });
        self.submit(scope, job)?;
        match answered.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(RunError::Unavailable(format!(
                "a policy evaluation panicked: {}",
                panic_message(panic.as_ref())
            ))),
            Err(_) => Err(RunError::Unavailable("the policy runner stopped".into())),
        }
    }

    /// Queues `job`, waking an idle thread or starting one if none is idle.
    fn submit(&self, scope: &str, job: Job) -> Result<(), RunError> {
        let shared = &self.owner.0;
        let start = {
            let mut state = shared.lock();
            if state.closed {
                return Err(RunError::Unavailable("the policy runner stopped".into()));
            }
            state.queue.push(scope, job);
            if state.idle == 0 && state.threads < shared.concurrency {
                state.threads += 1;
                Some(state.threads)
            } else {
                None
            }
        };
        let Some(n) = start else {
            shared.work.notify_one();
            return Ok(());
        };
        let worker = shared.clone();
        let started = std::thread::Builder::new()
            .name(format!("forge-policy-{n}"))
            .spawn(move || worker.work());
        if let Err(e) = started {
            let mut state = shared.lock();
            state.threads -= 1;
            if state.threads == 0 {
                // Nobody would ever run what is queued: fail it.
                let left = state.queue.drain();
                drop(state);
                drop(left);
                return Err(RunError::Unavailable(format!(
                    "could not start a policy thread: {e}"
                )));
            }
            // The job waits for the threads there are.
            tracing::warn!("could not start another policy thread: {e}");
        }
        Ok(())
    }

    /// Evaluate `request` with `chain` on a runner thread.
    pub async fn evaluate(
        &self,
        chain: Arc<Chain>,
        request: Arc<PolicyRequest>,
    ) -> Result<ChainOutcome, RunError> {
        Ok(self.run(move || chain.evaluate(&request)).await??)
    }

    /// Evaluations of `scope` running now.
    #[cfg(test)]
    fn running(&self, scope: &str) -> usize {
        self.owner.0.lock().queue.running(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Waits (bounded) until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !cond() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_scope_cannot_take_every_thread() {
        let runner = PolicyRunner::new(4);
        assert_eq!(runner.share(), 2);
        // Team a floods: 6 evaluations that block until released.
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        let mut flood = Vec::new();
        for _ in 0..6 {
            let (runner, held) = (runner.clone(), held.clone());
            flood.push(tokio::spawn(async move {
                runner
                    .run_as("a", move || {
                        let _ = held.lock().expect("lock").recv();
                    })
                    .await
            }));
        }
        until("a runs its share", || runner.running("a") == 2).await;
        // Team b is still served while a's flood waits.
        let b = tokio::time::timeout(Duration::from_secs(10), runner.run_as("b", || 7))
            .await
            .expect("b is not starved")
            .expect("ran");
        assert_eq!(b, 7);
        assert_eq!(runner.running("a"), 2, "a never runs more than its share");
        for _ in 0..6 {
            release.send(()).expect("release");
        }
        for f in flood {
            f.await.expect("join").expect("ran");
        }
    }

    #[test]
    fn a_single_thread_is_everyones_share() {
        assert_eq!(PolicyRunner::new(1).share(), 1);
        assert_eq!(PolicyRunner::new(0).share(), 1);
        assert_eq!(PolicyRunner::new(9).share(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_evaluation_fails_alone() {
        let runner = PolicyRunner::new(1);
        let err = runner
            .run(|| -> u32 { panic!("plugin host bug") })
            .await
            .expect_err("a panic is an error");
        assert!(
            matches!(&err, RunError::Unavailable(m) if m.contains("plugin host bug")),
            "{err}"
        );
        // The one thread survived and serves the next evaluation.
        assert_eq!(runner.run(|| 5).await.expect("runs"), 5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_evaluation_never_runs() {
        let runner = PolicyRunner::new(1);
        let (release, held) = mpsc::channel::<()>();
        let busy = tokio::spawn({
            let runner = runner.clone();
            async move { runner.run(move || held.recv().is_ok()).await }
        });
        until("the thread is busy", || runner.running("") == 1).await;
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let abandoned = {
            let ran = ran.clone();
            let runner = runner.clone();
            tokio::spawn(async move {
                runner
                    .run(move || ran.store(true, std::sync::atomic::Ordering::SeqCst))
                    .await
            })
        };
        // Queued behind the busy one, then its caller goes away.
        until("it is queued", || {
            runner.owner.0.lock().queue.waiting() == 1
        })
        .await;
        abandoned.abort();
        let _ = abandoned.await;
        release.send(()).expect("release");
        assert!(busy.await.expect("join").expect("ran"));
        // The next evaluation runs after the abandoned one would have.
        runner.run(|| ()).await.expect("runs");
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_runner_stops_its_threads() {
        let runner = PolicyRunner::new(2);
        let (a, b) = tokio::join!(runner.run(|| 1), runner.run(|| 2));
        assert_eq!((a.expect("runs"), b.expect("runs")), (1, 2));
        let shared = Arc::downgrade(&runner.owner.0);
        assert!(shared.upgrade().expect("alive").lock().threads >= 1);
        drop(runner);
        // The threads hold the shared state until they exit.
        until("its threads exited", || shared.upgrade().is_none()).await;
    }
}
