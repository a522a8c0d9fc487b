//! [`UploadError`]: why an upload operation failed, and what each variant answers
//! ([`Answers`]: status, stable code, the request field concerned).

use http::StatusCode;
use serde_json::json;

use crate::answer::{Answer, Answers, BoxError, Failed};
use crate::domain::Digest;
use crate::objects::ObjectStoreError;

/// Why an upload operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// No such session for the caller's team (or it expired, or it completed).
    #[error("upload {0} not found (expired, completed or aborted?)")]
    NotFound(String),
    /// The capsule is not one the team may name.
    #[error("capsule {0} is not stored for your team")]
    CapsuleAbsent(Digest),
    /// The declared digest is not a SHA-256.
    #[error("digest: a SHA-256 is 64 lowercase hex digits")]
    InvalidDigest,
    /// The declared size is 0 or over the limit.
    #[error("size: {size} bytes is not between 1 and {limit}")]
    BadSize {
        /// Declared size.
        size: u64,
        /// Largest accepted.
        limit: u64,
    },
    /// The team has as many open sessions as it may.
    #[error("your team has {limit} open uploads (the limit); finish or abort one: {}", .open.join(", "))]
    TooManySessions {
        /// The limit.
        limit: u64,
        /// The open sessions' ids.
        open: Vec<String>,
    },
    /// The part size asked for does not suit the object store or the request limit.
    #[error("partBytes: {part_bytes} does not work: {why}")]
    BadPartSize {
        /// Asked (or the default).
        part_bytes: u64,
        /// Why not.
        why: String,
    },
    /// Another request (maybe on another replica) is completing the session.
    #[error(
        "upload {0} is being completed by another request; its capsule appears when that is done"
    )]
    Completing(String),
    /// A chunk's range does not fit the session.
    #[error("content-range: {0}")]
    BadRange(String),
    /// A chunk larger than a PUT may carry.
    #[error("content-range: a chunk is at most {limit} bytes, this one is {len}")]
    ChunkTooLarge {
        /// The chunk's length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The body's length is not the range's.
    #[error("the body has {got} bytes but the content-range announces {expected}")]
    BodyLength {
        /// Announced.
        expected: u64,
        /// Received (as far as it was read).
        got: u64,
    },
    /// The body stopped before its end (client gone, network): nothing recorded.
    #[error("the chunk's body was interrupted: {0}")]
    Interrupted(String),
    /// Completion asked with ranges still missing.
    #[error("{} byte range(s) are still missing", .missing.len())]
    Incomplete {
        /// The gaps (half-open byte ranges).
        missing: Vec<[u64; 2]>,
    },
    /// The assembled bytes do not hash to the declared digest (the session is gone).
    #[error("the uploaded bytes hash to {got}, not the declared {expected}; upload again")]
    DigestMismatch {
        /// Declared.
        expected: Digest,
        /// Computed.
        got: String,
    },
    /// The upload is not the capsule this gateway builds from its code and spec.
    #[error(
        "the upload is not a canonical capsule: packed again it is {got}, not {expected} \
         (a client of another version, or an altered capsule)"
    )]
    NotCanonical {
        /// The upload's digest.
        expected: Digest,
        /// The digest of the gateway's own packing.
        got: String,
    },
    /// The capsule's content is unacceptable (hostile, too large, …).
    #[error(transparent)]
    Capsule(#[from] forge_capsule::CapsuleError),
    /// Object storage failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] ObjectStoreError),
    /// Recording or reading capsule ownership failed.
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// Local disk or a blocking task failed.
    #[error(transparent)]
    Io(#[from] Failed),
}

impl UploadError {
    pub(crate) fn io(what: &str, e: impl Into<BoxError>) -> Self {
        UploadError::Io(Failed::new(what, e))
    }
}

impl Answers for UploadError {
    fn answer(&self) -> Answer {
        let message = self.to_string();
        let bad = StatusCode::BAD_REQUEST;
        match self {
            UploadError::NotFound(_) => {
                Answer::new(StatusCode::NOT_FOUND, "upload.not-found", message).field("id")
            }
            UploadError::CapsuleAbsent(_) => {
                Answer::new(StatusCode::NOT_FOUND, "unknown-capsule", message).field("digest")
            }
            UploadError::InvalidDigest => {
                Answer::new(bad, "invalid-digest", message).field("digest")
            }
            // A declared size outside 1..=the largest capsule is a malformed request
            // (the document's `minimum` and `maximum`), whatever its body: 400.
            UploadError::BadSize { .. } => {
                Answer::new(bad, "upload.bad-size", message).field("size")
            }
            UploadError::TooManySessions { open, .. } => Answer::new(
                StatusCode::TOO_MANY_REQUESTS,
                "upload.too-many-sessions",
                message,
            )
            .details(json!({ "field": null, "open": open })),
            UploadError::BadPartSize { .. } => {
                Answer::new(bad, "upload.bad-part-size", message).field("partBytes")
            }
            UploadError::Completing(_) => {
                Answer::new(StatusCode::CONFLICT, "upload.completing", message).field("id")
            }
            UploadError::BadRange(_) => {
                Answer::new(bad, "upload.bad-range", message).field("content-range")
            }
            UploadError::ChunkTooLarge { limit, .. } => Answer::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "upload.chunk-too-large",
                message,
            )
            .details(json!({ "field": "content-range", "limit": limit })),
            UploadError::BodyLength { .. } => {
                Answer::new(bad, "upload.body-length", message).field("body")
            }
            UploadError::Interrupted(_) => {
                Answer::new(bad, "upload.interrupted", message).field("body")
            }
            UploadError::Incomplete { missing } => {
                Answer::new(StatusCode::CONFLICT, "upload.incomplete", message)
                    .details(json!({ "field": null, "missing": missing }))
            }
            UploadError::DigestMismatch { .. } => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "upload.digest-mismatch",
                message,
            )
            .field("digest"),
            UploadError::NotCanonical { .. } => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "upload.not-canonical",
                message,
            )
            .field("body"),
            UploadError::Capsule(e) => e.answer(),
            UploadError::ObjectStore(_) => Answer::storage_unavailable("stored"),
            UploadError::Store(e) => crate::answer::Answers::answer(e),
            UploadError::Io(_) => Answer::internal(),
        }
    }
}
