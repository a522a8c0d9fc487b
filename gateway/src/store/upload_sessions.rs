//! Resumable upload sessions ([`UploadSessionStore`]): a session is a row, and each
//! chunk that arrived is a part row, so every replica sees every session — a
//! `forge submit` begun on one replica is resumed and completed on any other (issue 40
//! §1). The bytes are not here: each chunk is one part of a multipart upload in the
//! object store (`uploads/`).
//!
//! A completion is claimed for a while ([`UploadSessionStore::claim_upload`]) so two
//! replicas asked at once do not both assemble and verify it; removal is a delete that
//! tells whether this caller removed the row, so an abort, an expiry and a completion
//! racing on two replicas clean up once.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::Digest;

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRecord {
    pub id: String,
    pub team: String,
    /// The SHA-256 the finished bytes must have.
    pub digest: Digest,
    /// Total bytes.
    pub size: u64,
    /// Every chunk is one part of this many bytes (the last one shorter).
    pub part_bytes: u64,
    /// The object store's multipart upload the parts belong to.
    pub multipart_id: String,
    pub created_at_ms: i64,
    /// The last accepted part (or the start): the age the sweeper goes by.
    pub touched_at_ms: i64,
}

/// One part that arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRecord {
    /// 1-based, as in S3: the part at byte offset `(number - 1) * part_bytes`.
    pub number: u32,
    /// Its bytes.
    pub len: u64,
    /// The object store's tag for it (named again when the upload is completed).
    pub etag: String,
}

/// Upload sessions and their parts.
#[async_trait]
pub trait UploadSessionStore: Send + Sync {
    /// Stores a new session.
    async fn create_upload(&self, upload: &UploadRecord) -> Result<(), StoreError>;
    /// The session `id`.
    async fn upload(&self, id: &str) -> Result<Option<UploadRecord>, StoreError>;
    /// A team's sessions, oldest first.
    async fn team_uploads(&self, team: &str) -> Result<Vec<UploadRecord>, StoreError>;
    /// Records (or replaces: a repeated chunk) a part and touches the session;
    /// `false` when the session is gone.
    async fn record_part(
        &self,
        id: &str,
        part: &PartRecord,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// The session's parts, by number.
    async fn upload_parts(&self, id: &str) -> Result<Vec<PartRecord>, StoreError>;
    /// Claims the session's completion until `until_ms` unless another claim holds at
    /// `now_ms`; `false` when it does (or the session is gone).
    async fn claim_upload(&self, id: &str, now_ms: i64, until_ms: i64) -> Result<bool, StoreError>;
    /// Lets a claim go (a completion that failed and may be asked again).
    async fn release_upload(&self, id: &str) -> Result<(), StoreError>;
    /// Removes the session and its parts; `true` when this call removed it.
    async fn delete_upload(&self, id: &str) -> Result<bool, StoreError>;
    /// Sessions untouched since `before_ms` and not being completed at `now_ms`.
    async fn expired_uploads(
        &self,
        before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<UploadRecord>, StoreError>;
}
