//! Runs chain evaluations off the async workers, fairly between scopes.
//!
//! WebAssembly execution is CPU-bound and may run up to its deadline; it must never
//! block a tokio worker. `PolicyRunner` bounds concurrency with a semaphore (sized to
//! the pooling allocator) and runs each evaluation on the blocking pool.
//!
//! Every evaluation runs for a scope (a team, or an admin task such as a replay), and
//! one scope may hold at most half of the permits (at least one): a team flooding
//! admissions with slow plugins waits on its own share while other teams keep being
//! evaluated. A scope first takes one of its own permits, then a shared one, so a
//! scope's excess requests queue behind each other, never in front of other scopes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use crate::chain::{Chain, ChainOutcome};
use crate::error::{ChainError, PluginError};
use crate::model::PolicyRequest;

/// Why an asynchronous evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A plugin failed; the admission fails closed.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The runner is shutting down or the blocking task panicked.
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

/// Bounded, off-worker execution of chain evaluations.
#[derive(Debug, Clone)]
pub struct PolicyRunner {
    permits: Arc<Semaphore>,
    /// Permits one scope may hold at once.
    share: usize,
    /// Each scope's own permits.
    scopes: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

/// The scope of evaluations that belong to no team (the unscoped [`PolicyRunner::run`]).
const UNSCOPED: &str = "";

impl PolicyRunner {
    /// `concurrency` evaluations may run at once (FORGE_POLICY_CONCURRENCY), at most
    /// half of them (at least one) for one scope.
    pub fn new(concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        PolicyRunner {
            permits: Arc::new(Semaphore::new(concurrency)),
            share: (concurrency / 2).max(1),
            scopes: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Permits one scope may hold at once.
    pub fn share(&self) -> usize {
        self.share
    }

    fn scope(&self, scope: &str) -> Arc<Semaphore> {
        let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        scopes
            .entry(scope.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
            .clone()
    }

    /// Run `f` for no particular scope (see [`PolicyRunner::run_as`]).
    pub async fn run<T, F>(&self, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.run_as(UNSCOPED, f).await
    }

    /// Run `f` for `scope` on the blocking pool once the scope's share and a permit
    /// are free. Whatever `f` loads (e.g. the active chain) is loaded only when it can
    /// run, so a request that waited for a permit across a policy swap runs on the new
    /// chain.
    pub async fn run_as<T, F>(&self, scope: &str, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let own = self
            .scope(scope)
            .acquire_owned()
            .await
            .map_err(|e| RunError::Unavailable(e.to_string()))?;
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| RunError::Unavailable(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _permits = (permit, own);
            f()
        })
        .await
        .map_err(|e| RunError::Unavailable(e.to_string()))
    }

    /// Evaluate `request` with `chain` on the blocking pool.
    pub async fn evaluate(
        &self,
        chain: Arc<Chain>,
        request: Arc<PolicyRequest>,
    ) -> Result<ChainOutcome, RunError> {
        Ok(self.run(move || chain.evaluate(&request)).await??)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_scope_cannot_take_every_permit() {
        let runner = PolicyRunner::new(4);
        assert_eq!(runner.share(), 2);
        // Team a floods: 6 evaluations that block until released.
        let (release, held) = std::sync::mpsc::channel::<()>();
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
        // Wait until a holds its whole share.
        let a = runner.scope("a");
        tokio::time::timeout(Duration::from_secs(10), async {
            while a.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("a holds its share");
        // Team b is still served while a's flood waits.
        let b = tokio::time::timeout(Duration::from_secs(10), runner.run_as("b", || 7))
            .await
            .expect("b is not starved")
            .expect("ran");
        assert_eq!(b, 7);
        assert_eq!(
            runner.permits.available_permits(),
            2,
            "a never holds more than its share"
        );
        for _ in 0..6 {
            release.send(()).expect("release");
        }
        for f in flood {
            f.await.expect("join").expect("ran");
        }
    }

    #[test]
    fn a_single_permit_is_everyones_share() {
        assert_eq!(PolicyRunner::new(1).share(), 1);
        assert_eq!(PolicyRunner::new(0).share(), 1);
        assert_eq!(PolicyRunner::new(9).share(), 4);
    }
}
