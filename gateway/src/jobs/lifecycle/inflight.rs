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
    /// the request is dropped: the caller asks again later if it still matters). A
    /// task that answers `Some(d)` keeps its key for `d` after it ends (its permit
    /// given back): the requests for that key in the meantime are dropped. A failed task backs off this way instead of being
    /// retried at the pace its callers ask.
    pub fn spawn_holding<F>(&self, key: String, task: F)
    where
        F: Future<Output = Option<Duration>> + Send + 'static,
    {
        self.spawn_after(key, async {}, task);
    }

    /// Like [`InFlight::spawn_holding`], but `first` runs before the permit is taken,
    /// holding only the key: a wait that uses none of what the bound protects (a
    /// stopped Ray job given its grace to end) does not hold back other keys' tasks.
    pub fn spawn_after<W, F>(&self, key: String, first: W, task: F)
    where
        W: Future<Output = ()> + Send + 'static,
        F: Future<Output = Option<Duration>> + Send + 'static,
    {
        let Some(claim) = self.keys.try_claim(&key) else {
            return;
        };
        let permits = self.permits.clone();
        tokio::spawn(async move {
            first.await;
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn a_first_step_waits_without_a_permit_and_keeps_its_key() {
        let inflight = InFlight::new(1);
        let ran = Arc::new(AtomicUsize::new(0));
        // Key a: its first step waits until released.
        let (release, released) = oneshot::channel::<()>();
        let (a_done, a_finished) = oneshot::channel();
        let r = ran.clone();
        inflight.spawn_after(
            "a".into(),
            async move {
                let _ = released.await;
            },
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                let _ = a_done.send(());
                None
            },
        );
        // The single permit is free meanwhile: key b runs to its end.
        let (b_done, b_finished) = oneshot::channel();
        inflight.spawn_holding("b".into(), async move {
            let _ = b_done.send(());
            None
        });
        tokio::time::timeout(Duration::from_secs(5), b_finished)
            .await
            .expect("b ran while a waited")
            .expect("b");
        // A second request for a while it waits is dropped.
        let r = ran.clone();
        inflight.spawn_holding("a".into(), async move {
            r.fetch_add(100, Ordering::SeqCst);
            None
        });
        release.send(()).expect("a waits");
        a_finished.await.expect("a ran");
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
