//! Capsule ownership ([`CapsuleStore`]): which teams uploaded which capsule bytes.
//!
//! Capsules are content-addressed and stored once, however many teams upload the same
//! bytes; ownership is what keeps them apart. A team is recorded as an owner when its
//! upload is packed and stored — also when the bytes were already there — and a
//! submission that names a capsule by digest is accepted only from an owner. Another
//! team gets the answer an unknown digest gets, so a digest seen anywhere (a RayJob
//! annotation, a pod spec, a log) is of no use to anyone but the teams that uploaded
//! it.
//!
//! The trait is small so every backend implements it the same way: an idempotent
//! insert of `(digest, team)` and a point lookup.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::Digest;

/// Who may reference a stored capsule.
#[async_trait]
pub trait CapsuleStore: Send + Sync {
    /// Records that `team` uploaded the bytes of capsule `digest`; recording an owner
    /// twice is not an error. Returns after the commit is durable.
    async fn grant_capsule(&self, digest: &Digest, team: &str) -> Result<(), StoreError>;
    /// Whether `team` uploaded the bytes of capsule `digest`.
    async fn capsule_owned_by(&self, digest: &Digest, team: &str) -> Result<bool, StoreError>;
}
