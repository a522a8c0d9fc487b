//! At most one background task per key and a bound on how many run at once — used for
//! archive-then-delete, which many finished jobs may need at the same moment and which
//! the lifecycle controller's resync may ask for again while one is still running.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// Keys with a task in flight, and the permits that bound them.
#[derive(Debug)]
pub struct InFlight {
    keys: Mutex<HashSet<String>>,
    permits: Arc<Semaphore>,
}

impl InFlight {
    /// At most `parallel` tasks at once.
    pub fn new(parallel: usize) -> Arc<Self> {
        Arc::new(InFlight {
            keys: Mutex::new(HashSet::new()),
            permits: Arc::new(Semaphore::new(parallel.max(1))),
        })
    }

    /// Runs `task` in the background unless one for `key` is already running (then
    /// the request is dropped: the caller asks again later if it still matters).
    pub fn spawn<F>(self: &Arc<Self>, key: String, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let fresh = self
            .keys
            .lock()
            .is_ok_and(|mut keys| keys.insert(key.clone()));
        if !fresh {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Ok(_permit) = this.permits.clone().acquire_owned().await {
                task.await;
            }
            if let Ok(mut keys) = this.keys.lock() {
                keys.remove(&key);
            }
        });
    }
}
