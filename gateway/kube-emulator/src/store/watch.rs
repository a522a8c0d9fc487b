//! Where a watch starts: a fresh watch's synthetic ADDED events, or the replay of the
//! retained history from a resourceVersion (also for a lagging watcher) — 410 Expired
//! when that resourceVersion is older than the window.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::event::{EventKind, WatchEvent};
use super::meta::meta_str;
use super::state::{Inner, Store};
use crate::error::ApiError;
use crate::resources::ResId;

/// Where a watch starts.
#[derive(Debug)]
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for a fresh watch, or replayed history).
    pub replay: Vec<Arc<WatchEvent>>,
    /// Live events; skip those with `rv <= start_rv`.
    pub rx: broadcast::Receiver<Arc<WatchEvent>>,
    /// Highest resourceVersion covered by `replay`.
    pub start_rv: u64,
}

impl Store {
    /// Starts a watch of `rid` (in `ns`, or everywhere) from resourceVersion `rv`
    /// (`None`/`0`: synthetic ADDED events for the current state first).
    pub fn watch(
        &self,
        rid: ResId,
        ns: Option<&str>,
        rv: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        let in_ns = |o: &Value| ns.is_none_or(|n| meta_str(o, "namespace").unwrap_or("") == n);
        let replay = match rv {
            None | Some(0) => inner.objects[rid]
                .values()
                .filter(|o| in_ns(o))
                .map(|o| {
                    Arc::new(WatchEvent {
                        rv: meta_str(o, "resourceVersion")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0),
                        res: rid,
                        kind: EventKind::Added,
                        object: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            Some(from) => inner
                .history_since(from)?
                .into_iter()
                .filter(|e| e.res == rid && in_ns(&e.object))
                .collect(),
        };
        Ok(WatchStart {
            replay,
            rx,
            start_rv: inner.rv,
        })
    }

    /// Events after `rv` (for a watcher that lagged behind the broadcast channel).
    pub fn history_since(&self, rv: u64) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
        self.lock().history_since(rv)
    }
}

impl Inner {
    /// The retained events after `rv`, or 410 Expired when `rv` is below the window.
    fn history_since(&self, rv: u64) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
        if rv < self.floor {
            return Err(ApiError::Expired(format!(
                "too old resource version: {rv} ({})",
                self.floor
            )));
        }
        Ok(self.history.iter().filter(|e| e.rv > rv).cloned().collect())
    }
}
