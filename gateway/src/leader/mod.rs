//! Leadership: which replica runs the dispatcher and the lifecycle controller, and the
//! fencing that keeps a deposed one from acting.
//!
//! **Election** is a lease row in the store ([`crate::store::CoordStore`]), taken and
//! renewed by compare-and-set with client-go's timings (lease 15 s, renew deadline
//! 10 s, retry 2 s; `FORGE_LEADER_*`). Each acquisition starts a new **epoch**, the
//! fencing token. The elector ([`elector`]) mirrors the lease into a
//! `coordination.k8s.io/v1` Lease for `kubectl get lease` (best effort).
//!
//! **Fencing.** A [`Term`] is one epoch of leadership as the controllers hold it:
//! - every store write they make carries [`Term::fence`] and is checked against the
//!   lease in the same transaction (refused once a newer epoch exists);
//! - every RayJob create or delete they decide is preceded by [`Term::check`]: this
//!   process still holds that epoch *and* its renew deadline has not passed, by the
//!   monotonic clock — so a leader that was frozen (SIGSTOP, a long GC-like pause, a
//!   partition) refuses to act the moment it runs again, before its elector has even
//!   noticed;
//! - the renew deadline is shorter than the lease, so a leader stops acting before
//!   another replica can acquire the lease.
//!
//! Followers serve the whole API (submissions are stored by any replica); only the
//! leader dispatches. Why a store row and not a Lease object as the authority: the
//! fencing check must be in the same transaction as the write it guards, which only
//! the database can do; the Kubernetes API offers no conditional write across objects.

pub mod elector;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use crate::cluster::lease::LeaseMirror;
use crate::metrics::Metrics;
use crate::store::{CoordStore, Fence, Lease};

pub use crate::cluster::lease::LEASE_NAME;

/// Election timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long the lease holds without a renewal.
    pub lease: Duration,
    /// A leader that could not renew for this long stops acting.
    pub renew_deadline: Duration,
    /// How often the lease is renewed, or tried by followers.
    pub retry: Duration,
}

impl Timings {
    /// From `FORGE_LEADER_*`.
    pub fn from_config(cfg: &crate::config::LeaderConfig) -> Self {
        Timings {
            lease: Duration::from_millis(cfg.lease_ms),
            renew_deadline: Duration::from_millis(cfg.renew_deadline_ms),
            retry: Duration::from_millis(cfg.retry_ms),
        }
    }
}

/// What this replica is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "role")]
pub enum Role {
    /// Serving the API; another replica (if any) dispatches.
    Follower {
        /// The holder of the lease as last seen, if any.
        leader: Option<String>,
    },
    /// Dispatching, in this epoch.
    Leader {
        /// The term's fencing token.
        epoch: u64,
    },
}

impl Role {
    /// `leader` or `follower`.
    pub fn name(&self) -> &'static str {
        match self {
            Role::Leader { .. } => "leader",
            Role::Follower { .. } => "follower",
        }
    }
}

/// A side effect refused because its term is over.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the leadership of epoch {epoch} has ended; {action} not performed")]
pub struct Deposed {
    /// The term.
    pub epoch: u64,
    /// What was refused.
    pub action: &'static str,
}

/// This replica's leadership state, shared by the elector and the controllers.
pub struct Leadership {
    replica: String,
    timings: Timings,
    store: Arc<dyn CoordStore>,
    mirror: Option<LeaseMirror>,
    metrics: Arc<Metrics>,
    role: watch::Sender<Role>,
    /// The clock [`Leadership::valid_until`] counts from.
    base: Instant,
    /// The current term's epoch (0: none).
    epoch: AtomicU64,
    /// Until when (ms since `base`) the current term may act.
    valid_until: AtomicU64,
    /// The lease as last written (for renewals and the release at shutdown).
    held: Mutex<Option<Lease>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("replica", &self.replica)
            .field("role", &*self.role.borrow())
            .finish()
    }
}

impl Leadership {
    /// A follower that will compete for the lease once [`elector::spawn`] runs.
    pub fn new(
        replica: String,
        timings: Timings,
        store: Arc<dyn CoordStore>,
        mirror: Option<LeaseMirror>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        metrics.leadership(false, 0);
        Arc::new(Leadership {
            replica,
            timings,
            store,
            mirror,
            metrics,
            role: watch::channel(Role::Follower { leader: None }).0,
            base: Instant::now(),
            epoch: AtomicU64::new(0),
            valid_until: AtomicU64::new(0),
            held: Mutex::new(None),
        })
    }

    /// This replica's identity in the lease.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The timings.
    pub fn timings(&self) -> Timings {
        self.timings
    }

    /// The role now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// A receiver that changes with the role.
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// The current term, if this replica leads.
    pub fn term(self: &Arc<Self>) -> Option<Term> {
        match *self.role.borrow() {
            Role::Leader { epoch } => Some(Term {
                leadership: self.clone(),
                epoch,
            }),
            Role::Follower { .. } => None,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether `epoch` is the current term and its renew deadline has not passed.
    fn is_current(&self, epoch: u64) -> bool {
        self.epoch.load(Ordering::SeqCst) == epoch
            && self.now_ms() < self.valid_until.load(Ordering::SeqCst)
    }

    /// Starts or extends a term: it may act until `attempt + renew_deadline`, where
    /// `attempt` is when the acquisition or renewal that succeeded was *sent* (the
    /// store's expiry is later than that by at least the lease).
    fn hold(&self, lease: Lease, attempt: Instant) {
        let until = attempt
            .saturating_duration_since(self.base)
            .saturating_add(self.timings.renew_deadline);
        let until = u64::try_from(until.as_millis()).unwrap_or(u64::MAX);
        let epoch = lease.epoch;
        if let Ok(mut held) = self.held.lock() {
            *held = Some(lease);
        }
        self.valid_until.store(until, Ordering::SeqCst);
        if self.epoch.swap(epoch, Ordering::SeqCst) != epoch {
            self.metrics.leadership(true, epoch);
            self.role.send_replace(Role::Leader { epoch });
        }
    }

    /// Ends the current term (lost, deadline passed, shutting down).
    fn step_down(&self, leader: Option<String>) {
        self.valid_until.store(0, Ordering::SeqCst);
        self.epoch.store(0, Ordering::SeqCst);
        if let Ok(mut held) = self.held.lock() {
            *held = None;
        }
        self.metrics.leadership(false, 0);
        self.role.send_if_modified(|r| {
            let next = Role::Follower { leader };
            let changed = *r != next;
            *r = next;
            changed
        });
    }

    /// The lease as this replica last held it.
    fn held(&self) -> Option<Lease> {
        self.held.lock().ok().and_then(|h| h.clone())
    }

    /// Stops leading and lets the lease expire now, so a successor need not wait for
    /// it (a clean shutdown). Call after the controllers have stopped.
    pub async fn release(&self) {
        let held = self.held();
        self.step_down(None);
        if let Some(lease) = held {
            match self.store.release(&lease).await {
                Ok(()) => tracing::info!(epoch = lease.epoch, "leader lease released"),
                Err(e) => tracing::warn!("releasing the leader lease: {e}"),
            }
        }
    }
}

/// One term of leadership, as the controllers hold it.
#[derive(Clone)]
pub struct Term {
    leadership: Arc<Leadership>,
    epoch: u64,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term").field("epoch", &self.epoch).finish()
    }
}

impl Term {
    /// The term's fencing token.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The fence store writes of this term carry.
    pub fn fence(&self) -> Fence {
        Fence {
            lease: LEASE_NAME.to_string(),
            epoch: self.epoch,
        }
    }

    /// Whether this term may still act: checked right before every RayJob create or
    /// delete it decides. A refusal is counted (`forge_fenced_total{action}`).
    pub fn check(&self, action: &'static str) -> Result<(), Deposed> {
        if self.leadership.is_current(self.epoch) {
            Ok(())
        } else {
            self.leadership.metrics.fenced(action);
            Err(Deposed {
                epoch: self.epoch,
                action,
            })
        }
    }

    /// Counts a store write refused by its fence.
    pub fn refused(&self, action: &'static str) {
        self.leadership.metrics.fenced(action);
    }
}
