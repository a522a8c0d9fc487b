//! Runs chain evaluations off the async workers.
//!
//! WebAssembly execution is CPU-bound and may run up to its deadline; it must never
//! block a tokio worker. `PolicyRunner` bounds concurrency with a semaphore (sized to
//! the pooling allocator) and runs each evaluation on the blocking pool.

use std::sync::Arc;

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
}

impl PolicyRunner {
    /// `concurrency` evaluations may run at once (FORGE_POLICY_CONCURRENCY).
    pub fn new(concurrency: usize) -> Self {
        PolicyRunner {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    /// Run `f` on the blocking pool once a permit is free. Whatever `f` loads (e.g. the
    /// active chain) is loaded only when it can run, so a request that waited for a
    /// permit across a policy swap runs on the new chain.
    pub async fn run<T, F>(&self, f: F) -> Result<T, RunError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| RunError::Unavailable(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
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
