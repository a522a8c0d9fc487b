//! Object storage for Forge: capsules (content-addressed, handed to Ray pods as
//! expiring URLs), archived job logs and policy plugin components, in an
//! S3-compatible store or, in dev mode, a local directory whose signed URLs the
//! gateway serves itself.
//!
//! Dependencies: none on `forge-capsule` (the capsule *format*), nor the other way
//! round; the gateway composes them. A capsule is stored as "a file whose SHA-256 is
//! `digest`": the store checks the digest's form for its key ([`capsule_key`]) and
//! the bytes against it, and needs nothing else from the format. Keeping the two
//! crates independent is simpler than either one-way dependency: the format stays
//! free of the async runtime, the S3 SDK and HTTP, and this crate of zip/tar.
//!
//! # Public API (for the gateway)
//!
//! ```text
//! let store: Arc<dyn ObjectStore> = Arc::new(S3Store::connect(S3Config::from_env()?).await?);
//! //    (S3Store::check() at start-up: Credentials / BucketMissing / Unreachable)
//! //    or, in dev mode: LocalStore::new(dir, hmac_key, public_base_url)? and
//! //    merge local_routes(store.clone()) into the gateway's axum router.
//! store.put_file(&digest, &capsule_path).await?;   // dedupes: AlreadyPresent
//! let url = store.get_url(&digest, ttl).await?;    // presigned (≤ 7 days) / signed
//! store.put_object(&log_key(job_id, "driver")?, bytes).await?;
//! store.get_object(&plugin_key(&digest)?).await?;
//! store.get_object_range(&log_key(job_id, "driver")?, offset, None).await?; // streamed
//! store.list_page(CAPSULES, None, MAX_LIST_PAGE).await?;  // key order, with sizes
//! store.delete_object(&capsule_key(&digest)?).await?;     // absent is fine
//! let id = store.start_multipart(&upload_key(session)?).await?;  // resumable uploads:
//! let tag = store.put_part(&key, &id, 1, bytes).await?;          // parts from any replica,
//! store.complete_multipart(&key, &id, &[(1, tag)]).await?;       // then one object
//! ```
//!
//! Errors: [`StoreError`], one enum callers branch on; nothing here knows HTTP
//! statuses (the gateway's HTTP edge maps variants). The only HTTP server is
//! [`local_routes()`] (`local_routes.rs`), which serves the local store's signed URLs.
//!
//! Files: `store.rs` (the [`ObjectStore`] trait), `keys.rs` (the key scheme),
//! `s3.rs` ([`S3Store`]), `local.rs` ([`LocalStore`]: files + URL signing),
//! `local_routes.rs` (its HTTP routes), `file_digest.rs`, `error.rs`.

pub mod error;
mod file_digest;
pub mod keys;
pub mod local;
pub mod local_routes;
pub mod s3;
pub mod store;

pub use error::StoreError;
pub use keys::{
    CAPSULES, LOGS, PLUGINS, UPLOADS, attempt_log_index_key, capsule_key, digest_of_capsule_key,
    job_logs_prefix, log_index_key, log_key, plugin_key, pod_log_key, upload_key, validate_digest,
    validate_key,
};
pub use local::{LocalStore, UrlError};
pub use local_routes::local_routes;
pub use s3::{MAX_PRESIGN_TTL, S3Config, S3Store};
pub use store::{MAX_LIST_PAGE, ObjectInfo, ObjectRange, ObjectStore, PutOutcome, StoreStats};
