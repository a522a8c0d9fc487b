//! Whether a fleet's API server answers (issue 42): a probe per fleet, a cheap LIST of
//! one Node every [`PROBE_EVERY`] (bounded by [`PROBE_WITHIN`]). After [`FAILURES`]
//! failed probes in a row the fleet is marked unavailable — its capacity reads as
//! unknown, so nothing is placed there and jobs pinned to it wait — and the first probe
//! that succeeds marks it available again. Each change moves the fleet's capacity
//! generation, so the dispatcher and the cached views see it at once.
//!
//! A probe rather than the capacity watches' own errors: a partitioned API server often
//! answers nothing at all (no error reaches a watch for minutes), and a bounded call is
//! the same test whatever the failure is.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use tokio::sync::watch;

/// How often each fleet is probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long one probe may take before it counts as failed.
pub const PROBE_WITHIN: Duration = Duration::from_secs(5);
/// Failed probes in a row that mark a fleet unavailable.
pub const FAILURES: u32 = 3;

/// The reader side: whether the fleet is available now.
#[derive(Clone, Debug)]
pub struct Availability {
    rx: watch::Receiver<bool>,
}

impl Availability {
    /// Starts probing `client`'s API server for fleet `fleet`; `changed` is bumped
    /// whenever the fleet becomes unavailable or available again. Starts available.
    pub fn probe(client: kube::Client, fleet: String, changed: Arc<watch::Sender<u64>>) -> Self {
        let (tx, rx) = watch::channel(true);
        tokio::spawn(async move {
            let nodes: Api<Node> = Api::all(client);
            let one = ListParams::default().limit(1);
            let mut failed = 0u32;
            let mut tick = tokio::time::interval(PROBE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let answered = matches!(
                    tokio::time::timeout(PROBE_WITHIN, nodes.list_metadata(&one)).await,
                    Ok(Ok(_))
                );
                failed = if answered {
                    0
                } else {
                    failed.saturating_add(1)
                };
                let available = failed < FAILURES;
                if *tx.borrow() != available {
                    if available {
                        tracing::info!(%fleet, "fleet available again: its API server answers");
                    } else {
                        tracing::warn!(%fleet, probes = FAILURES, "fleet unavailable: its API server did not answer; nothing is placed there until it does");
                    }
                    if tx.send(available).is_err() {
                        return; // nobody reads it any more
                    }
                    changed.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
        });
        Availability { rx }
    }

    /// Whether the fleet answered its last probes.
    pub fn is_available(&self) -> bool {
        *self.rx.borrow()
    }
}
