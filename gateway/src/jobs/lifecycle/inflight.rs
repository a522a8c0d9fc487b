//! At most one background task per key and a bound on how many run at once — used for
//! archive-then-delete, which many finished jobs may need at the same moment and which
//! the lifecycle controller's resync may ask for again while one is still running.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::jobs::claims::Claims;

/// Keys with a task in flight, and the permits that bound them.
#[derive(Debug)]
pub struct InFlight {
    keys: Arc<Claims>,
    permits: Arc<Semaphore>,
}

impl InFlight {
    /// At most `parallel` tasks at once.
    pub fn new(parallel: usize) -> Arc<Self> {
        Arc::new(InFlight {
            keys: Arc::default(),
            permits: Arc::new(Semaphore::new(parallel.max(1))),
        })
    }

    /// Runs `task` in the background unless one for `key` is already running (then
    /// the request is dropped: the caller asks again later if it still matters).
    pub fn spawn<F>(&self, key: String, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_holding(key, async move {
            task.await;
            None
        });
    }

    /// Like [`InFlight::spawn`], but a task that answers `Some(d)` keeps its key for
    /// `d` after it ends (its permit given back): the requests for that key in the
    /// meantime are dropped. A failed task backs off this way instead of being
    /// retried at the pace its callers ask.
    pub fn spawn_holding<F>(&self, key: String, task: F)
    where
        F: Future<Output = Option<Duration>> + Send + 'static,
    {
        let Some(claim) = self.keys.try_claim(&key) else {
            return;
        };
        let permits = self.permits.clone();
        tokio::spawn(async move {
            let hold = match permits.acquire_owned().await {
                Ok(_permit) => task.await,
                Err(_) => None,
            };
            if let Some(hold) = hold {
                tokio::time::sleep(hold).await;
            }
            drop(claim);
        });
    }
}
