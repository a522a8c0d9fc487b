//! Capsule ownership ([`CapsuleStore`]): which teams uploaded which capsule bytes, and
//! when each last used them.
//!
//! Capsules are content-addressed and stored once, however many teams upload the same
//! bytes; ownership is what keeps them apart. A team is recorded as an owner when its
//! upload is packed and stored — also when the bytes were already there — and a
//! submission that names a capsule by digest is accepted only from an owner. Another
//! team gets the answer an unknown digest gets, so a digest seen anywhere (a RayJob
//! annotation, a pod spec, a log) is of no use to anyone but the teams that uploaded
//! it.
//!
//! Every upload and every use refreshes the owner's last use; retention
//! (`crate::retention`) forgets ownerships unused for `FORGE_RETENTION_CAPSULES_S` and
//! deletes bytes nobody owns. Because an upload of bytes that are already stored skips
//! the upload, a deletion racing it could take the bytes it relied on: the grant, made
//! in one step with retention's claim, says whether a deletion of these bytes began, and
//! the uploader then stores them again ([`crate::retention::ensure_stored`]).

use async_trait::async_trait;

use super::StoreError;
use crate::domain::Digest;

/// Where retention stands on deleting a capsule's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// Claimed: the bytes are being deleted.
    Deleting,
    /// The bytes were deleted (recently: finished deletions are forgotten after a day).
    Deleted,
}

impl Deletion {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Deletion::Deleting => "deleting",
            Deletion::Deleted => "deleted",
        }
    }

    /// From its stored form.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "deleting" => Ok(Deletion::Deleting),
            "deleted" => Ok(Deletion::Deleted),
            other => Err(StoreError::Corrupt(format!(
                "unknown capsule deletion state {other:?}"
            ))),
        }
    }
}

/// Who may reference a stored capsule.
#[async_trait]
pub trait CapsuleStore: Send + Sync {
    /// Records that `team` uploaded the bytes of capsule `digest` (again: its last use
    /// becomes now). Returns where retention stands on deleting these bytes, if a
    /// deletion began and is not yet forgotten: then the bytes the caller stored, or
    /// found stored, may be gone, and it must store them again once the deletion is
    /// over. Returns after the commit is durable.
    async fn grant_capsule(
        &self,
        digest: &Digest,
        team: &str,
    ) -> Result<Option<Deletion>, StoreError>;
    /// Whether `team` may reference capsule `digest` (it uploaded the bytes). When it
    /// may, the use is recorded (its last use becomes now), which keeps retention from
    /// deleting the capsule for another `FORGE_RETENTION_CAPSULES_S`.
    async fn use_capsule(&self, digest: &Digest, team: &str) -> Result<bool, StoreError>;
    /// Where retention stands on deleting the bytes of `digest`.
    async fn capsule_deletion(&self, digest: &Digest) -> Result<Option<Deletion>, StoreError>;
}
