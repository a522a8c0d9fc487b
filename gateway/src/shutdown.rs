//! The process is stopping. The HTTP server's graceful shutdown waits for every open
//! response to finish, and a server-sent event stream (`/v1/jobs/watch`, the console's
//! live feeds) never finishes by itself: without this, one open `forge jobs watch` or
//! console tab would hold a SIGTERM'ed replica until Kubernetes kills it, and with it
//! the leader lease and the dispatcher's clean stop. When shutdown begins, every such
//! stream ends; clients reconnect (with `Last-Event-ID`) to another replica.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

/// Tells long-lived responses that the process is stopping. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown(Arc::new(watch::channel(false).0))
    }
}

impl Shutdown {
    /// Shutdown begins: every [`Shutdown::begun`] future resolves.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }

    /// Resolves once shutdown has begun (at once if it already has).
    pub fn begun(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|stopping| *stopping).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn begun_resolves_for_waiters_before_and_after_the_start() {
        let s = Shutdown::default();
        let early = tokio::spawn(s.begun());
        tokio::task::yield_now().await;
        assert!(!early.is_finished());
        s.begin();
        early.await.expect("early waiter");
        // A stream opened after shutdown began ends at once.
        s.clone().begun().await;
    }
}
