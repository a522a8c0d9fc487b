//! The elector loop (client-go's `LeaderElector`, on the store's lease row):
//!
//! - **follower**: every `retry`, try to acquire the lease; a free or expired lease
//!   is taken in a new epoch;
//! - **leader**: every `retry`, renew it (compare-and-set on holder and epoch). A
//!   renewal that succeeds extends the term to *send time + renew deadline*; one that
//!   finds the lease taken ends the term at once; failures (the store unreachable) are
//!   retried until the renew deadline, then the term ends — every wait is bounded by
//!   the deadline, so a hung store cannot keep a leader acting.
//!
//! After each acquisition and renewal the lease is mirrored into the Kubernetes Lease
//! (in the background, one write at a time).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{LEASE_NAME, Leadership};
use crate::cluster::lease::MirrorError;
use crate::store::{Acquire, Lease};

/// Runs the elector until the task is aborted.
pub fn spawn(leadership: Arc<Leadership>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mirror = Mirror::default();
        loop {
            let Some(lease) = follow(&leadership, &mirror).await else {
                continue;
            };
            lead(&leadership, &mirror, lease).await;
        }
    })
}

/// Tries to acquire once; returns the lease when this replica took it (after `retry`
/// otherwise).
async fn follow(l: &Arc<Leadership>, mirror: &Mirror) -> Option<Lease> {
    let t = l.timings;
    let attempt = Instant::now();
    match tokio::time::timeout(t.retry.max(Duration::from_millis(500)), async {
        l.store.acquire(LEASE_NAME, &l.replica, t.lease).await
    })
    .await
    {
        Ok(Ok(Acquire::Acquired(lease))) => {
            tracing::info!(
                replica = %l.replica,
                epoch = lease.epoch,
                "acquired the leader lease: dispatching"
            );
            l.hold(lease.clone(), attempt);
            mirror.write(l, &lease);
            return Some(lease);
        }
        Ok(Ok(Acquire::Held(other))) => l.step_down(Some(other.holder)),
        Ok(Err(e)) => tracing::warn!("trying the leader lease: {e}"),
        Err(_) => tracing::warn!("trying the leader lease: the store did not answer"),
    }
    tokio::time::sleep(t.retry).await;
    None
}

/// Renews every `retry` until the lease is lost or the renew deadline passes.
async fn lead(l: &Arc<Leadership>, mirror: &Mirror, mut lease: Lease) {
    let t = l.timings;
    let mut deadline = Instant::now() + t.renew_deadline;
    loop {
        tokio::time::sleep(t.retry).await;
        let attempt = Instant::now();
        if attempt >= deadline {
            tracing::warn!(epoch = lease.epoch, "renew deadline passed: stepping down");
            break;
        }
        match tokio::time::timeout(deadline - attempt, l.store.renew(&lease, t.lease)).await {
            Ok(Ok(Some(renewed))) => {
                deadline = attempt + t.renew_deadline;
                l.hold(renewed.clone(), attempt);
                mirror.write(l, &renewed);
                lease = renewed;
            }
            Ok(Ok(None)) => {
                tracing::warn!(
                    epoch = lease.epoch,
                    "the leader lease was taken by another replica: stepping down"
                );
                break;
            }
            Ok(Err(e)) => tracing::warn!(epoch = lease.epoch, "renewing the leader lease: {e}"),
            Err(_) => {
                tracing::warn!(epoch = lease.epoch, "renewing the leader lease timed out");
                break;
            }
        }
    }
    l.step_down(None);
}

/// The Kubernetes Lease writer: at most one write in flight; a write that finds Leases
/// not served is reported once.
#[derive(Default, Clone)]
struct Mirror {
    busy: Arc<AtomicBool>,
    reported: Arc<AtomicBool>,
}

impl Mirror {
    fn write(&self, l: &Arc<Leadership>, lease: &Lease) {
        let Some(api) = l.mirror.clone() else {
            return;
        };
        if self.busy.swap(true, Ordering::SeqCst) {
            return; // the previous write is still out; the next renewal writes again
        }
        let (this, lease) = (self.clone(), lease.clone());
        let secs = i32::try_from(l.timings.lease.as_secs().max(1)).unwrap_or(i32::MAX);
        tokio::spawn(async move {
            match api.write(&lease, secs).await {
                Ok(()) => {}
                Err(MirrorError::NotServed) => {
                    if !this.reported.swap(true, Ordering::SeqCst) {
                        tracing::info!(
                            "{}: not mirrored (the leader lease in the store is authoritative)",
                            MirrorError::NotServed
                        );
                    }
                }
                Err(e) => {
                    if !this.reported.swap(true, Ordering::SeqCst) {
                        tracing::warn!("{e} (leadership is unaffected; reported once)");
                    }
                }
            }
            this.busy.store(false, Ordering::SeqCst);
        });
    }
}
