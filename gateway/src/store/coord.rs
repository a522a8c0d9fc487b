//! The coordination store's interface ([`CoordStore`]): what replicas sharing one
//! database agree on besides jobs and policies — the leader lease and the
//! installation's identity — and a cheap liveness query for readiness.
//!
//! **The lease** is one row per name: holder, epoch, and the time until which it is
//! held (the database's clock for PostgreSQL, so replicas' clocks never compare).
//! [`CoordStore::acquire`] takes a lease that is free or expired and always starts a
//! new epoch (epochs only grow: the epoch is the fencing token); [`CoordStore::renew`]
//! extends it only for the same holder *and* epoch (compare-and-set), so a holder that
//! lost it — even to a successor that has since let it expire — cannot renew it back
//! into the old epoch. Writes fenced with the epoch ([`super::Fence`]) check it in their
//! own transaction.
//!
//! **The installation identity** is recorded on first start (`FORGE_INSTANCE`, or a
//! generated UUID) and labels every object the gateway creates, so a gateway can tell
//! its RayJobs from another installation's.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use super::StoreError;

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The lease's name.
    pub name: String,
    /// Who holds (or last held) it.
    pub holder: String,
    /// The holder's term: grows by one at every acquisition.
    pub epoch: u64,
    /// When this term started (Unix ms, the store's clock).
    pub acquired_at_ms: i64,
    /// The last renewal (Unix ms, the store's clock).
    pub renewed_at_ms: i64,
    /// Held until then (Unix ms, the store's clock).
    pub expires_at_ms: i64,
}

/// What an acquisition attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The caller holds the lease now, in a new epoch.
    Acquired(Lease),
    /// Someone holds it and it has not expired.
    Held(Lease),
}

/// The key of the installation identity in the store's metadata.
pub const INSTANCE_KEY: &str = "instance";

/// Leases, the installation identity, liveness.
#[async_trait]
pub trait CoordStore: Send + Sync {
    /// A round trip to the database (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
    /// A value every replica shares: `candidate` is recorded under `key` by the first
    /// call (of any replica); every call returns the recorded value.
    async fn shared_value(&self, key: &str, candidate: String) -> Result<String, StoreError>;
    /// The installation identity: recorded on first call (`wanted`, else `generated`);
    /// later calls return the recorded one. A `wanted` identity that differs from the
    /// recorded one is [`StoreError::InstanceMismatch`].
    async fn instance(
        &self,
        wanted: Option<String>,
        generated: String,
    ) -> Result<String, StoreError> {
        let stored = self
            .shared_value(INSTANCE_KEY, wanted.clone().unwrap_or(generated))
            .await?;
        match wanted {
            Some(w) if w != stored => Err(StoreError::InstanceMismatch { stored, wanted: w }),
            _ => Ok(stored),
        }
    }
    /// Takes lease `name` for `holder` for `ttl` if it is free or expired (a new epoch);
    /// otherwise reports who holds it.
    async fn acquire(&self, name: &str, holder: &str, ttl: Duration)
    -> Result<Acquire, StoreError>;
    /// Extends `lease` by `ttl` if it is still held by its holder at its epoch;
    /// `None` when it is not (lost).
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, StoreError>;
    /// Lets `lease` expire now (a clean shutdown: a successor need not wait), if it is
    /// still held at its epoch.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;
    /// Lease `name` as stored.
    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError>;
}

/// A new installation identity (a random UUID: a valid label value).
pub fn generate_instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `ttl` in milliseconds, as the stores keep times.
pub fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}
