//! At most one background task per key and a bound on how many run at once — used for
//! archive-then-delete, which many finished jobs may need at the same moment and which
//! the lifecycle controller's resync may ask for again while one is still running.

use std::future::Future;
use std::sync::Arc;

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
        let Some(claim) = self.keys.try_claim(&key) else {
            return;
        };
        let permits = self.permits.clone();
        tokio::spawn(async move {
            if let Ok(_permit) = permits.acquire_owned().await {
                task.await;
            }
            drop(claim);
        });
    }
}
